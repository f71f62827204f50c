import { describe, expect, it } from "vitest";
import {
  waitForFinalCheckpoint,
  type FinalCheckpointWaitOptions,
} from "../../src/training/final-checkpoint.ts";

/**
 * A platform whose latest checkpoint step is read from `answers` in turn (the last one repeats),
 * and a swarm with an aux in it unless `options.auxPresent` says otherwise.
 */
function run(answers: readonly (number | null | Error)[], options: Partial<FinalCheckpointWaitOptions> = {}) {
  const lines: { level: string; message: string }[] = [];
  let asked = 0;
  const outcome = waitForFinalCheckpoint({
    step: 10,
    latestStep: () => {
      const answer = answers[Math.min(asked++, answers.length - 1)];
      return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer ?? null);
    },
    auxPresent: () => true,
    log: (level, message) => lines.push({ level, message }),
    signal: new AbortController().signal,
    timeoutMs: 200,
    pollMs: 10,
    ...options,
  });
  return { outcome, lines, asked: () => asked };
}

describe("waitForFinalCheckpoint", () => {
  it("returns at once when the last step is checkpointed already, saying nothing", async () => {
    const { outcome, lines, asked } = run([10]);
    expect(await outcome).toBe("checkpointed");
    expect(asked()).toBe(1);
    expect(lines).toEqual([]);
  });

  it("does not wait when no aux is in the swarm to take the checkpoint", async () => {
    const { outcome, lines } = run([5], { auxPresent: () => false });
    expect(await outcome).toBe("no-aux");
    expect(lines).toEqual([]);
  });

  it("waits for the run's first checkpoint too, when the last step comes before everySteps", async () => {
    const { outcome, asked } = run([null, null, 10]);
    expect(await outcome).toBe("checkpointed");
    expect(asked()).toBe(3);
  });

  it("stops waiting, saying so, when the aux leaves", async () => {
    let present = 2;
    const { outcome, lines } = run([5], { auxPresent: () => present-- > 0 });
    expect(await outcome).toBe("no-aux");
    expect(lines.at(-1)).toEqual({
      level: "warn",
      message: "the aux left before it checkpointed the run's last step 10; leaving",
    });
  });

  it("waits, saying why, until the platform lists the last step, through a failed request", async () => {
    const { outcome, lines, asked } = run([5, new Error("503"), 5, 10]);
    expect(await outcome).toBe("checkpointed");
    expect(asked()).toBe(4);
    expect(lines).toEqual([
      {
        level: "info",
        message:
          "waiting up to 0 s for the aux to checkpoint the run's last step 10, whose state this peer holds",
      },
      { level: "info", message: "the run's last step 10 is checkpointed" },
    ]);
  });

  it("gives up after the wait and says which checkpoint the run has", async () => {
    const { outcome, lines, asked } = run([5]);
    expect(await outcome).toBe("timed-out");
    expect(asked()).toBeGreaterThan(2);
    expect(lines.at(-1)).toEqual({
      level: "warn",
      message:
        "no checkpoint of the run's last step 10 within 0 s; leaving (the latest checkpoint is step 5)",
    });
  });

  it("stops waiting at once when the peer is stopped", async () => {
    const stop = new AbortController();
    const { outcome, asked } = run([5], { signal: stop.signal, timeoutMs: 60_000, pollMs: 30_000 });
    setTimeout(() => {
      stop.abort();
    }, 20);
    expect(await outcome).toBe("stopped");
    expect(asked()).toBe(1);
  });
});
