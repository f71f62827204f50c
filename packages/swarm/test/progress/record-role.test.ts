import { describe, expect, it } from "vitest";
import { SwarmError, SwarmErrorCode } from "../../src/errors.ts";
import {
  checkRecordRole,
  progressRecordSchema,
  type ProgressRecord,
} from "../../src/progress/progress-messages.ts";

/** A trainer's record at epoch 4 with its state fingerprint and solo steps. */
function trainerRecord(overrides: Partial<ProgressRecord> = {}): ProgressRecord {
  return {
    epoch: 4,
    samplesAccumulated: 10,
    samplesPerSecond: 5,
    time: 1_700_000_000_000,
    mode: "node",
    lossSum: 2,
    minibatches: 1,
    step: 4,
    bytesAggregated: 0,
    stateHash: { epoch: 4, digest: "0123456789abcdef" },
    soloSteps: 3,
    ...overrides,
  };
}

/** What an aux legitimately publishes: the round it helps average, the state it serves, no samples. */
function auxRecord(overrides: Partial<ProgressRecord> = {}): ProgressRecord {
  return {
    epoch: 4,
    samplesAccumulated: 0,
    samplesPerSecond: 0,
    time: 1_700_000_000_000,
    mode: "aux",
    lossSum: 0,
    minibatches: 0,
    step: 4,
    bytesAggregated: 4096,
    averagingEpoch: 4,
    stateEpoch: 3,
    round: { epoch: 3, bytesSent: 100 },
    ...overrides,
  };
}

function refusal(record: ProgressRecord, role: "aux" | "trainer"): SwarmError {
  try {
    checkRecordRole(record, role);
  } catch (error) {
    if (error instanceof SwarmError) return error;
    throw error;
  }
  throw new Error("the record was accepted");
}

describe("checkRecordRole and a trainer's state fingerprint", () => {
  it("takes a trainer's record with its state digest and solo steps", () => {
    expect(() => {
      checkRecordRole(trainerRecord(), "trainer");
    }).not.toThrow();
    expect(() => {
      checkRecordRole(trainerRecord({ mode: "client", soloSteps: 0 }), "trainer");
    }).not.toThrow();
    expect(progressRecordSchema.parse(trainerRecord())).toEqual(trainerRecord());
  });

  it("takes an aux's own record, which claims neither", () => {
    expect(() => {
      checkRecordRole(auxRecord(), "aux");
    }).not.toThrow();
    // Zero solo steps claim nothing, as zero samples do.
    expect(() => {
      checkRecordRole(auxRecord({ soloSteps: 0 }), "aux");
    }).not.toThrow();
  });

  it("refuses an aux record that claims a state digest, naming the field", () => {
    const error = refusal(auxRecord({ stateHash: { epoch: 4, digest: "0123456789abcdef" } }), "aux");
    expect(error.code).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
    expect(error.message).toMatch(/^a progress record from an aux pass cannot claim stateHash\b/);
    expect(error.message).not.toContain("soloSteps");
  });

  it("refuses an aux record that claims solo steps, naming the field and the count", () => {
    const error = refusal(auxRecord({ soloSteps: 7 }), "aux");
    expect(error.code).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
    expect(error.message).toMatch(/cannot claim soloSteps 7$/);
    expect(error.message).not.toContain("stateHash");
  });

  it("names both when an aux claims both, along with what else it claims", () => {
    const error = refusal(
      auxRecord({ samplesTotal: 9, soloSteps: 2, stateHash: { epoch: 0, digest: "ffffffffffffffff" } }),
      "aux",
    );
    expect(error.code).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
    expect(error.message).toMatch(/cannot claim samplesTotal 9, soloSteps 2, stateHash\b/);
  });

  it("refuses an aux pass's record in trainer mode even with nothing but a fingerprint in it", () => {
    const idle = { samplesAccumulated: 0, samplesPerSecond: 0, lossSum: 0, minibatches: 0 };
    const error = refusal(trainerRecord({ ...idle, soloSteps: 0 }), "aux");
    expect(error.code).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
    expect(error.message).toMatch(/cannot claim mode node, stateHash\b/);
  });

  it("refuses a digest that is not 16 lowercase hex digits", () => {
    const digest = (value: string) =>
      progressRecordSchema.safeParse(trainerRecord({ stateHash: { epoch: 4, digest: value } }));
    expect(digest("0123456789abcdef").success).toBe(true);
    for (const bad of [
      "0123456789ABCDEF", // upper case
      "0123456789abcde", // 15 digits
      "0123456789abcdef0", // 17 digits
      "0123456789abcdeg", // not hex
      "",
      " 0123456789abcdef",
      "0123456789abcdef\n",
    ]) {
      const result = digest(bad);
      expect(result.success, JSON.stringify(bad)).toBe(false);
      expect(result.error?.issues[0]?.path).toEqual(["stateHash", "digest"]);
      expect(result.error?.issues[0]?.message).toBe("must be 16 lowercase hex digits");
    }
  });

  it("refuses a fingerprint without its epoch or with fields of its own, and solo steps that are no count", () => {
    const parse = (value: unknown) =>
      progressRecordSchema.safeParse({ ...trainerRecord(), ...(value as object) });
    expect(parse({ stateHash: { digest: "0123456789abcdef" } }).success).toBe(false);
    expect(parse({ stateHash: { epoch: 4, digest: "0123456789abcdef", peer: "x" } }).success).toBe(false);
    expect(parse({ stateHash: { epoch: -1, digest: "0123456789abcdef" } }).success).toBe(false);
    expect(parse({ soloSteps: -1 }).success).toBe(false);
    expect(parse({ soloSteps: 1.5 }).success).toBe(false);
    expect(parse({ soloSteps: 0 }).success).toBe(true);
  });
});
