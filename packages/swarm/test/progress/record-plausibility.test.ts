import { describe, expect, it } from "vitest";
import type { ProgressRecord } from "../../src/progress/progress-messages.ts";
import {
  implausibility,
  MAX_EPOCH_LEAD,
  PLAUSIBLE_RATE_RATIO,
} from "../../src/progress/record-plausibility.ts";

const NOW = 1_800_000_000_000;

function record(epoch: number): ProgressRecord {
  return {
    epoch,
    samplesAccumulated: 0,
    samplesPerSecond: 40,
    time: NOW,
    mode: "node",
    lossSum: 0,
    minibatches: 0,
    step: epoch,
    bytesAggregated: 0,
  };
}

/** Why a record at `epoch` is refused by a receiver that holds `knownEpoch` beside `others`. */
function judge(epoch: number, others: readonly number[], knownEpoch?: number): string | undefined {
  return implausibility(record(epoch), {
    previous: undefined,
    others: others.map(record),
    knownEpoch,
    now: NOW,
    announcedSamples: 0,
  });
}

describe("the epoch bound of a progress record", () => {
  it("follows most of the trainers, so that keys taking turns at the lead cannot raise it", () => {
    // Honest trainers at 50, one colluding key already believed at the lead.
    expect(judge(50 + MAX_EPOCH_LEAD, [50, 50, 50], 50)).toBeUndefined();
    expect(judge(50 + 2 * MAX_EPOCH_LEAD, [50, 50, 50, 50 + MAX_EPOCH_LEAD], 50)).toMatch(
      /^epoch 58 is past the swarm's 50/,
    );
    // When most trainers did move on, so does the bound.
    expect(judge(61, [57, 58, 58, 50], 57)).toBeUndefined();
  });

  it("leaves out the trainers still loading the state after a resume", () => {
    // The checkpoint the receiver serves is of epoch 100; two trainers loaded it and stepped on,
    // three have not loaded it yet.
    expect(judge(107, [0, 0, 0, 106], 100)).toBeUndefined();
    expect(judge(107, [0, 0, 0], 100)).toMatch(/^epoch 107 is past the swarm's 100/);
  });

  it("takes the others' maximum at a receiver that holds no state yet", () => {
    expect(judge(203, [0, 0, 200])).toBeUndefined();
    expect(judge(205, [0, 0, 200])).toMatch(/^epoch 205 is past the swarm's 200/);
  });
});

/** Why a first record claiming `rate` samples/s is refused beside trainers reporting `rates`. */
function judgeRate(rate: number, rates: readonly number[]): string | undefined {
  return implausibility(
    { ...record(50), samplesPerSecond: rate },
    {
      previous: undefined,
      others: rates.map((other) => ({ ...record(50), samplesPerSecond: other })),
      now: NOW,
      announcedSamples: 0,
    },
  );
}

describe("the throughput bound of a progress record", () => {
  it("follows most of the trainers, so that keys taking turns cannot compound their claims", () => {
    // Three honest trainers at 40 samples/s, one colluding key already believed at 64×.
    expect(judgeRate(PLAUSIBLE_RATE_RATIO * 40, [40, 40, 40])).toBeUndefined();
    expect(
      judgeRate(PLAUSIBLE_RATE_RATIO * PLAUSIBLE_RATE_RATIO * 40, [40, 40, 40, PLAUSIBLE_RATE_RATIO * 40]),
    ).toMatch(/samples\/s is over 64× the other trainers' \(2560 at most\)/);
  });

  it("believes a volunteer 10× faster than the rest, and leaves out trainers that report no throughput yet", () => {
    expect(judgeRate(400, [40, 40, 40])).toBeUndefined();
    expect(judgeRate(400, [0, 0, 0, 40, 40])).toBeUndefined();
    expect(judgeRate(1e9, [0, 0, 0, 40, 40])).toMatch(/samples\/s is over 64×/);
  });
});
