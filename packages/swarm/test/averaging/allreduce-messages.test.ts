import { describe, expect, it } from "vitest";
import {
  encodeRefusalFrame,
  encodeResultFrame,
  refusalOf,
  REFUSAL_REASONS,
} from "../../src/averaging/allreduce-messages.ts";

describe("refusal frames", () => {
  it("carry each reason a reducer tells, and are told apart from result frames", () => {
    for (const reason of REFUSAL_REASONS) expect(refusalOf(encodeRefusalFrame(reason))).toBe(reason);
    const result = encodeResultFrame(3, {
      totalWeight: 2,
      contributors: new Uint8Array([3]),
      payload: new Uint8Array(8),
    });
    expect(refusalOf(result)).toBeUndefined();
    expect(refusalOf(new Uint8Array(2))).toBeUndefined();
  });

  it("refuse an unknown reason or a wrong size as malformed", () => {
    const unknown = encodeRefusalFrame("timeout");
    unknown[4] = REFUSAL_REASONS.length;
    expect(() => refusalOf(unknown)).toThrow(expect.objectContaining({ code: "MALFORMED_MESSAGE" }));
    const long = new Uint8Array(6);
    long.set(encodeRefusalFrame("malformed"));
    expect(() => refusalOf(long)).toThrow(/refusal frame of 6 bytes/);
  });
});
