import { describe, expect, it } from "vitest";
import { PLAIN_RESUME_GRACE_MS, RESUME_GRACE_MS, ResumeWatch } from "../../src/monitor/resume-watch.ts";

/** Feeds `check` one observation per 250 ms tick, as the aux's loop does; returns what it said. */
function watchFor(
  watch: ResumeWatch,
  from: number,
  ms: number,
  observe: { alive: number; step: number; lastPosted?: number; held?: number },
): { at: number; step: number } | undefined {
  for (let now = from; now <= from + ms; now += 250) {
    const step = watch.check(now, observe.alive, observe.step, observe.lastPosted, observe.held);
    if (step !== undefined) return { at: now, step };
  }
  return undefined;
}

describe("ResumeWatch", () => {
  it("says nothing while the swarm steps forward past the recorded steps", () => {
    const watch = new ResumeWatch();
    for (let step = 1; step < 50; step++) {
      expect(watch.check(step * 250, 2, step, step - 1, Math.floor(step / 10) * 10)).toBeUndefined();
    }
  });

  it("names the aux's held state within a second when every trainer left and newcomers went on from it", () => {
    const watch = new ResumeWatch();
    expect(watchFor(watch, 0, 1_000, { alive: 2, step: 210, lastPosted: 209, held: 200 })).toBeUndefined();
    // Nobody for a while: nothing to say, and the highest step seen is kept.
    expect(watchFor(watch, 2_000, 30_000, { alive: 0, step: 0, lastPosted: 210, held: 200 })).toBeUndefined();
    // A newcomer says hello at step 0 before it loads a state: no evidence yet.
    expect(watchFor(watch, 33_000, 3_000, { alive: 1, step: 0, lastPosted: 210, held: 200 })).toBeUndefined();
    // It loaded the aux's state of step 200 and trains on, fast enough to pass 210 in a few seconds.
    const said = watchFor(watch, 37_000, 5_000, { alive: 1, step: 202, lastPosted: 210, held: 200 });
    expect(said?.step).toBe(200);
    expect(said?.at).toBeLessThanOrEqual(37_000 + PLAIN_RESUME_GRACE_MS);
  });

  it("takes a straggler one step behind for no resume, and one that stays behind the records for one", () => {
    const watch = new ResumeWatch();
    watchFor(watch, 0, 1_000, { alive: 2, step: 40, lastPosted: 40, held: 35 });
    // The leader left; the straggler is one step behind for a moment.
    expect(watch.check(2_000, 1, 39, 40, 35)).toBeUndefined();
    expect(watch.check(2_250, 1, 40, 40, 35)).toBeUndefined();
    // Behind the recorded steps for longer than the grace: it went back to the held state.
    const said = watchFor(watch, 3_000, RESUME_GRACE_MS + 1_000, {
      alive: 1,
      step: 39,
      lastPosted: 41,
      held: 35,
    });
    expect(said).toEqual({ at: 3_000 + RESUME_GRACE_MS, step: 35 });
  });

  it("after a full restart, names the platform's checkpoint as soon as the platform refuses a later step", () => {
    const watch = new ResumeWatch();
    watch.startedFrom(38);
    expect(watch.check(0, 2, 45, undefined, 44)).toBeUndefined();
    watch.refused(39);
    // Even though the swarm is ahead of the recorded steps by now.
    expect(watch.check(250, 2, 60, 55, 54)).toBe(38);
    // Said once.
    expect(watch.check(500, 2, 61, 55, 54)).toBeUndefined();
  });

  it("after a full restart, says nothing when the platform stored the steps after the checkpoint", () => {
    const watch = new ResumeWatch();
    watch.startedFrom(38);
    watch.stored();
    watch.refused(39);
    expect(watchFor(watch, 0, 10_000, { alive: 2, step: 45, lastPosted: 44, held: 44 })).toBeUndefined();
  });

  it("without a held state, names the lowest step the swarm was seen at", () => {
    const watch = new ResumeWatch();
    watchFor(watch, 0, 500, { alive: 1, step: 90, lastPosted: 90 });
    expect(watch.check(1_000, 1, 70, 90, undefined)).toBeUndefined();
    const said = watchFor(watch, 1_250, 2_000, { alive: 1, step: 71, lastPosted: 90 });
    expect(said?.step).toBe(70);
  });
});
