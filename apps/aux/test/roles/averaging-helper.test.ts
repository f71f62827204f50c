import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import {
  AveragingHelper,
  MAX_RETRIES_JOINED,
  RETRY_AFTER_MS,
  type AveragingHelperPorts,
} from "../../src/roles/averaging-helper.ts";

const LENGTH = 6;
const TARGET = 1_000;

type Event = { kind: "report"; epoch: number } | { kind: "average"; epoch: number; vector: Float32Array };

/** A helper over a mutable fake swarm; `events` records report and average calls in order. */
function setup(ports: Partial<AveragingHelperPorts> = {}) {
  const swarm = { epoch: 5, samplesAccumulated: TARGET, targetBatchSize: TARGET };
  const clock = { now: 0 };
  const events: Event[] = [];
  const logger = pino({ level: "silent" });
  const debug = vi.spyOn(logger, "debug");
  const helper = new AveragingHelper({
    logger,
    global: () => ({ ...swarm }),
    report: (epoch) => {
      events.push({ kind: "report", epoch });
    },
    average: (epoch, vector) => {
      events.push({ kind: "average", epoch, vector: vector.slice() });
      return Promise.resolve({ groupSize: 3 });
    },
    now: () => clock.now,
    ...ports,
  });
  const averaged = () => events.filter((event) => event.kind === "average").map((event) => event.epoch);
  return { helper, swarm, clock, events, averaged, debug };
}

const signal = new AbortController().signal;

describe("AveragingHelper", () => {
  it("does nothing before it knows the vector length", async () => {
    const { helper, events } = setup();
    await helper.maybeHelp(signal);
    expect(events).toEqual([]);
    expect(helper.rounds).toBe(0);
  });

  it("joins once the swarm's samples reach the target, reporting the epoch before averaging a zero vector", async () => {
    const { helper, swarm, events } = setup();
    helper.setVectorLength(LENGTH);
    swarm.samplesAccumulated = TARGET - 1;
    await helper.maybeHelp(signal);
    expect(events).toEqual([]);

    swarm.samplesAccumulated = TARGET;
    await helper.maybeHelp(signal);
    expect(events).toEqual([
      { kind: "report", epoch: 5 },
      { kind: "average", epoch: 5, vector: new Float32Array(LENGTH) },
    ]);
    expect(helper.rounds).toBe(1);
  });

  it("uses the latest vector length", async () => {
    const { helper, events } = setup();
    helper.setVectorLength(LENGTH);
    helper.setVectorLength(LENGTH + 3);
    await helper.maybeHelp(signal);
    expect(events.at(-1)).toEqual({ kind: "average", epoch: 5, vector: new Float32Array(LENGTH + 3) });
  });

  it("helps each epoch at most once, however often it is asked", async () => {
    const { helper, swarm, averaged } = setup();
    helper.setVectorLength(LENGTH);
    await helper.maybeHelp(signal);
    await helper.maybeHelp(signal);
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([5]);

    swarm.epoch = 6;
    await helper.maybeHelp(signal);
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([5, 6]);
    expect(helper.rounds).toBe(2);
  });

  it("helps the epochs again that a swarm averages again after it went back to an older state", async () => {
    const { helper, swarm, averaged } = setup();
    helper.setVectorLength(LENGTH);
    swarm.epoch = 9;
    await helper.maybeHelp(signal);
    // The swarm resumed from a checkpoint of step 7: without being told, it would wait for epoch 10.
    swarm.epoch = 7;
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([9]);
    helper.forgetFrom(7);
    await helper.maybeHelp(signal);
    swarm.epoch = 8;
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([9, 7, 8]);
  });

  it("does not join another round while one is in flight", async () => {
    const round = Promise.withResolvers<{ groupSize: number }>();
    const epochs: number[] = [];
    const { helper, swarm } = setup({
      average: (epoch) => {
        epochs.push(epoch);
        return epoch === 5 ? round.promise : Promise.resolve({ groupSize: 2 });
      },
    });
    helper.setVectorLength(LENGTH);
    const first = helper.maybeHelp(signal);
    swarm.epoch = 6;
    await helper.maybeHelp(signal);
    expect(epochs).toEqual([5]);

    round.resolve({ groupSize: 2 });
    await first;
    await helper.maybeHelp(signal);
    expect(epochs).toEqual([5, 6]);
    expect(helper.rounds).toBe(2);
  });

  it("swallows a failed round with a debug log, joins the trainers' retry of that epoch, and helps the next", async () => {
    const failure = new Error("matchmaking timed out");
    const epochs: number[] = [];
    let failFive = true;
    const { helper, swarm, debug } = setup({
      average: (epoch) => {
        epochs.push(epoch);
        return epoch === 5 && failFive ? Promise.reject(failure) : Promise.resolve({ groupSize: 2 });
      },
    });
    helper.setVectorLength(LENGTH);
    await helper.maybeHelp(signal);
    expect(debug).toHaveBeenCalledWith(
      expect.objectContaining({ epoch: 5, err: failure }),
      expect.any(String),
    );
    expect(helper.rounds).toBe(0);
    failFive = false;
    await helper.maybeHelp(signal);
    expect(epochs).toEqual([5, 5]);
    expect(helper.rounds).toBe(1);
    // Helped once it succeeded: not again.
    await helper.maybeHelp(signal);
    expect(epochs).toEqual([5, 5]);

    swarm.epoch = 6;
    await helper.maybeHelp(signal);
    expect(epochs).toEqual([5, 5, 6]);
    expect(helper.rounds).toBe(2);
  });

  it("joins the trainers' retry of an epoch whose round ended for the aux, while the swarm stays at it", async () => {
    // The aux's part was reduced, but a part another member reduced broke: the trainers retry.
    const { helper, swarm, clock, averaged } = setup();
    helper.setVectorLength(LENGTH);
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([5]);
    clock.now += RETRY_AFTER_MS - 1;
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([5]);
    clock.now += 1;
    await helper.maybeHelp(signal);
    expect(averaged()).toEqual([5, 5]);
    // Not more often than MAX_RETRIES_JOINED times.
    for (let i = 0; i < 5; i++) {
      clock.now += RETRY_AFTER_MS;
      await helper.maybeHelp(signal);
    }
    expect(averaged()).toEqual(Array.from({ length: 1 + MAX_RETRIES_JOINED }, () => 5));
    // The next epoch is helped as usual, and its retries counted afresh.
    swarm.epoch = 6;
    await helper.maybeHelp(signal);
    clock.now += RETRY_AFTER_MS;
    await helper.maybeHelp(signal);
    expect(averaged().slice(-2)).toEqual([6, 6]);
  });

  it("keeps an epoch helped when joining a retry of it finds no group (the trainers had finished)", async () => {
    let calls = 0;
    const { helper, clock, averaged } = setup({
      average: () => {
        calls += 1;
        return calls === 1 ? Promise.resolve({ groupSize: 3 }) : Promise.reject(new Error("no group formed"));
      },
    });
    helper.setVectorLength(LENGTH);
    await helper.maybeHelp(signal);
    clock.now += RETRY_AFTER_MS;
    await helper.maybeHelp(signal);
    expect(calls).toBe(2);
    // The failed retry is not a failed first round: it is not tried again at once.
    await helper.maybeHelp(signal);
    expect(calls).toBe(2);
    expect(averaged()).toEqual([]);
  });

  it("rethrows when the signal is aborted", async () => {
    const controller = new AbortController();
    const { helper } = setup({
      average: () => {
        controller.abort(new Error("stopping"));
        return Promise.reject(new Error("round cancelled"));
      },
    });
    helper.setVectorLength(LENGTH);
    await expect(helper.maybeHelp(controller.signal)).rejects.toThrow("round cancelled");
    expect(helper.rounds).toBe(0);
  });

  it("refuses a vector length that is not a positive integer", () => {
    const { helper } = setup();
    for (const length of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => {
        helper.setVectorLength(length);
      }).toThrow(RangeError);
    }
  });
});
