import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  optimalPartFractions,
  partElementCounts,
  predictedAllReduceSeconds,
  uniformPartFractions,
  type MemberCapacity,
} from "../../src/averaging/load-balancing.ts";
import { SwarmErrorCode } from "../../src/errors.ts";
import { seededRandom as seeded } from "../support/seeded-random.ts";

const GBIT = 125e6; // bytes per second in 1 Gb/s
const RESNET50_BYTES = 25.6e6 * 4;

function peer(peerId: string, gbits: number, roles: Partial<MemberCapacity> = {}): MemberCapacity {
  return {
    peerId,
    uploadBytesPerSecond: gbits * GBIT,
    downloadBytesPerSecond: gbits * GBIT,
    canReduce: true,
    sends: true,
    ...roles,
  };
}

function peers(prefix: string, count: number, gbits: number): MemberCapacity[] {
  return Array.from({ length: count }, (_, i) => peer(`${prefix}${String(i).padStart(2, "0")}`, gbits));
}

// DeDLOC Table 1 (ResNet-50 averaging), with the measured AR and "Ours" seconds.
const setupA = peers("a", 8, 1);
const setupB = peers("b", 16, 0.2);
const setupC = [...setupA, ...setupB];
const setupD = [...setupB, peer("big", 2.5)];

async function modelledSpeedup(members: MemberCapacity[]): Promise<number> {
  const uniform = predictedAllReduceSeconds(members, uniformPartFractions(members), RESNET50_BYTES);
  const optimal = predictedAllReduceSeconds(members, await optimalPartFractions(members), RESNET50_BYTES);
  return uniform / optimal;
}

function sum(values: readonly number[]): number {
  return values.reduce((total, v) => total + v, 0);
}

function bits(values: readonly number[]): string {
  return Buffer.from(new Float64Array(values).buffer).toString("hex");
}

/**
 * The optimum of the same model found without an LP: a member with part w moves
 * base + slope·w bytes per vector byte over its slower link, so a time T is reachable iff every
 * member's feasible part interval is non-empty and the intervals can add up to 1. Bisect on T.
 */
function referenceOptimumSeconds(members: readonly MemberCapacity[]): number {
  const senders = members.filter((m) => m.sends).length;
  const feasible = (t: number): boolean => {
    let low = 0;
    let high = 0;
    for (const m of members) {
      const own = m.sends ? 1 : 0;
      const base = own;
      const slope = senders - own - own;
      const budget = t * Math.min(m.uploadBytesPerSecond, m.downloadBytesPerSecond);
      const maxW = m.canReduce ? 1 : 0;
      let lo = 0;
      let hi = maxW;
      if (slope > 0) hi = Math.min(hi, (budget - base) / slope);
      else if (slope < 0) lo = Math.max(lo, (budget - base) / slope);
      else if (base > budget) return false;
      if (lo > hi) return false;
      low += lo;
      high += hi;
    }
    return low <= 1 && 1 <= high;
  };
  let lo = 0;
  let hi = predictedAllReduceSeconds(members, uniformPartFractions(members), 1);
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (feasible(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

describe("optimalPartFractions", () => {
  it("gives equal parts to members with equal bandwidth", async () => {
    const fractions = await optimalPartFractions(peers("p", 5, 0.5));
    for (const f of fractions) expect(f).toBeCloseTo(0.2, 10);
    expect(sum(fractions)).toBe(1);
  });

  it("gives a client-mode member no part, however fast it is", async () => {
    const members = [...peers("p", 3, 0.1), peer("client", 10, { canReduce: false })];
    const fractions = await optimalPartFractions(members);
    expect(fractions[3]).toBe(0);
    for (const f of fractions.slice(0, 3)) expect(f).toBeCloseTo(1 / 3, 10);
    expect(sum(fractions)).toBe(1);
  });

  it("lets an aux peer reduce without sending: 4 senders + 1 aux at equal speed → 1/6 each, aux 1/3", async () => {
    // sender: 1 + 2w vector loads per link, aux: 4w; equal times at w = 1/6 and 1/3 (T = 4/3).
    const members = [...peers("p", 4, 1), peer("aux", 1, { sends: false })];
    const fractions = await optimalPartFractions(members);
    for (const f of fractions.slice(0, 4)) expect(f).toBeCloseTo(1 / 6, 10);
    expect(fractions[4]).toBeCloseTo(1 / 3, 10);
    expect(predictedAllReduceSeconds(members, fractions, GBIT)).toBeCloseTo(4 / 3, 9);
  });

  it("hands every part to a fast aux peer when slow senders are the bottleneck anyway", async () => {
    const members = [...peers("p", 4, 0.1), peer("aux", 1, { sends: false })];
    const fractions = await optimalPartFractions(members);
    expect(fractions).toEqual([0, 0, 0, 0, 1]);
  });

  it("respects separate upload and download speeds", async () => {
    // Three senders each move 1 + w vectors per link. a's uplink alone takes 1/0.25 = 4 s with
    // no part, so a gets none and b and c split the parts evenly (1.5 s each).
    const slowUp = { ...peer("a", 1), uploadBytesPerSecond: 0.25 * GBIT };
    const members = [slowUp, peer("b", 1), peer("c", 1)];
    const fractions = await optimalPartFractions(members);
    expect(fractions[0]).toBe(0);
    expect(fractions[1]).toBeCloseTo(0.5, 10);
    expect(fractions[2]).toBeCloseTo(0.5, 10);
    expect(predictedAllReduceSeconds(members, fractions, GBIT)).toBe(4);
  });

  it("reproduces DeDLOC Table 1: C (8×1 + 16×0.2 Gb/s) is 23/12 ≈ 1.92× faster than uniform", async () => {
    // Uniform: a 0.2 Gb/s member moves 1 + 22/24 vectors; optimal: the slow members only send
    // (1 vector) and the 8 fast ones split the parts evenly (1 + 22/8 = 3.75 vectors at 5× speed).
    const fractions = await optimalPartFractions(setupC);
    for (const f of fractions.slice(0, 8)) expect(f).toBeCloseTo(0.125, 10);
    expect(fractions.slice(8)).toEqual(Array.from({ length: 16 }, () => 0));
    const speedup = await modelledSpeedup(setupC);
    expect(speedup).toBeCloseTo(23 / 12, 10);
    expect(Math.abs(speedup - 5.69 / 2.96)).toBeLessThan(0.01); // measured 1.92×
  });

  it("reproduces DeDLOC Table 1: D (16×0.2 + 1×2.5 Gb/s) is 57/34 ≈ 1.68× faster than uniform", async () => {
    // All 17 finish together: 1 + 15·w_i = T·b_i with Σw = 1 → T = 32/5.7 (Gb/s units) against
    // uniform 32/17/0.2 → speed-up 5·5.7/17 = 57/34.
    const speedup = await modelledSpeedup(setupD);
    expect(speedup).toBeCloseTo(57 / 34, 10);
    expect(Math.abs(speedup - 5.3 / 3.18)).toBeLessThan(0.01); // measured 1.67×
    const fractions = await optimalPartFractions(setupD);
    expect(fractions[16]).toBeCloseTo((2.5 * 32) / 5.7 / 15 - 1 / 15, 10);
  });

  it("changes nothing for the homogeneous set-ups A and B", async () => {
    expect(await modelledSpeedup(setupA)).toBeCloseTo(1, 9);
    expect(await modelledSpeedup(setupB)).toBeCloseTo(1, 9);
  });

  it("is bit-identical on repeated calls and for any order of the same members", async () => {
    const random = seeded(7);
    const members = Array.from({ length: 20 }, (_, i) => ({
      ...peer(`m${i}`, 0.05 + random() * 2, { sends: i % 7 !== 3, canReduce: i % 5 !== 2 }),
      downloadBytesPerSecond: (0.05 + random() * 2) * GBIT,
    }));
    const first = await optimalPartFractions(members);
    const second = await optimalPartFractions(members);
    expect(bits(second)).toBe(bits(first));
    for (let round = 0; round < 5; round++) {
      const permutation = members.map((_, i) => i);
      for (let i = permutation.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [permutation[i], permutation[j]] = [permutation[j] ?? 0, permutation[i] ?? 0];
      }
      const shuffled = permutation.map((i) => members[i] as MemberCapacity);
      const fractions = await optimalPartFractions(shuffled);
      const restored = new Array<number>(members.length);
      permutation.forEach((memberIndex, k) => (restored[memberIndex] = fractions[k] ?? NaN));
      expect(bits(restored)).toBe(bits(first));
    }
  });

  it("finds the model's optimum, never loses to uniform, and returns clean fractions (property)", async () => {
    const memberArb = fc.record({
      up: fc.double({ min: 1e5, max: 1e9, noNaN: true }),
      down: fc.double({ min: 1e5, max: 1e9, noNaN: true }),
      canReduce: fc.boolean(),
      sends: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(memberArb, { minLength: 1, maxLength: 16 }), async (specs) => {
        const members: MemberCapacity[] = specs.map((s, i) => ({
          peerId: `q${i}`,
          uploadBytesPerSecond: s.up,
          downloadBytesPerSecond: s.down,
          canReduce: s.canReduce || i === 0,
          sends: s.sends || i === specs.length - 1,
        }));
        const fractions = await optimalPartFractions(members);
        expect(sum(fractions)).toBe(1);
        fractions.forEach((f, i) => {
          expect(f).toBeGreaterThanOrEqual(0);
          if (!members[i]?.canReduce) expect(f).toBe(0);
        });
        const optimal = predictedAllReduceSeconds(members, fractions, 1);
        const uniform = predictedAllReduceSeconds(members, uniformPartFractions(members), 1);
        expect(optimal).toBeLessThanOrEqual(uniform * (1 + 1e-6));
        const reference = referenceOptimumSeconds(members);
        expect(Math.abs(optimal - reference)).toBeLessThanOrEqual(1e-7 * reference + 1e-20);
      }),
      { seed: 20240611, numRuns: 60 },
    );
  });

  it.each<[string, MemberCapacity[], RegExp]>([
    ["an empty group", [], /no member .* can reduce/],
    [
      "a group where no member can reduce",
      [peer("a", 1, { canReduce: false }), peer("b", 1, { canReduce: false })],
      /no member .* can reduce/,
    ],
    [
      "a group where no member sends",
      [peer("a", 1, { sends: false }), peer("b", 1, { sends: false })],
      /no member .* sends/,
    ],
    [
      "a zero upload bandwidth",
      [peer("a", 1), { ...peer("b", 1), uploadBytesPerSecond: 0 }],
      /upload bandwidth of b must be a finite positive number, got 0/,
    ],
    [
      "a negative download bandwidth",
      [peer("a", 1), { ...peer("b", 1), downloadBytesPerSecond: -5 }],
      /download bandwidth of b .* got -5/,
    ],
    [
      "a NaN bandwidth",
      [peer("a", 1), { ...peer("b", 1), uploadBytesPerSecond: NaN }],
      /upload bandwidth of b .* got NaN/,
    ],
    [
      "an infinite bandwidth",
      [peer("a", 1), { ...peer("b", 1), downloadBytesPerSecond: Infinity }],
      /download bandwidth of b .* got Infinity/,
    ],
    ["a peer listed twice", [peer("a", 1), peer("a", 2)], /peer a is listed twice/],
  ])("refuses %s", async (_, members, message) => {
    await expect(optimalPartFractions(members)).rejects.toMatchObject({
      name: "SwarmError",
      code: SwarmErrorCode.LOAD_BALANCING_FAILED,
      message: expect.stringMatching(message) as unknown,
    });
  });
});

describe("uniformPartFractions", () => {
  it("splits evenly among the members that can reduce", () => {
    const members = [peer("a", 1), peer("b", 1, { canReduce: false }), peer("c", 1, { sends: false })];
    expect(uniformPartFractions(members)).toEqual([0.5, 0, 0.5]);
    expect(() => uniformPartFractions([peer("a", 1, { canReduce: false })])).toThrow(/no member/);
  });
});

describe("partElementCounts", () => {
  it("rounds by largest remainder, ties to the lower index", () => {
    expect(partElementCounts(10, [1 / 3, 1 / 3, 1 / 3])).toEqual([4, 3, 3]);
    expect(partElementCounts(3, [0.5, 0.25, 0.25])).toEqual([1, 1, 1]);
    expect(partElementCounts(7, [0.1, 0.6, 0.3])).toEqual([1, 4, 2]);
    expect(partElementCounts(1, [0, 1])).toEqual([0, 1]);
    expect(partElementCounts(0, [0.5, 0.5])).toEqual([0, 0]);
  });

  it("always sums to the length, each count within one of its quota, zero parts stay empty", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 30_000_000 }),
        fc.array(fc.oneof(fc.constant(0), fc.double({ min: 1e-6, max: 1, noNaN: true })), {
          minLength: 1,
          maxLength: 40,
        }),
        (length, raw) => {
          const fractions = raw.some((f) => f > 0) ? raw : [...raw, 1];
          const counts = partElementCounts(length, fractions);
          expect(sum(counts)).toBe(length);
          const total = sum(fractions);
          counts.forEach((c, i) => {
            const f = fractions[i] ?? 0;
            expect(Math.abs(c - (length * f) / total)).toBeLessThan(1);
            if (f === 0) expect(c).toBe(0);
          });
        },
      ),
      { seed: 99, numRuns: 300 },
    );
  });

  it("refuses a bad length or bad fractions", () => {
    for (const [length, fractions] of [
      [-1, [1]],
      [2.5, [1]],
      [10, []],
      [10, [0, 0]],
      [10, [0.5, -0.1]],
      [10, [NaN, 1]],
    ] as const) {
      expect(() => partElementCounts(length, fractions)).toThrow(
        expect.objectContaining({ code: SwarmErrorCode.LOAD_BALANCING_FAILED }),
      );
    }
  });
});

describe("predictedAllReduceSeconds", () => {
  it("takes the slowest member, each limited by its slower link", () => {
    const members = [
      { ...peer("a", 1), uploadBytesPerSecond: 50, downloadBytesPerSecond: 200 },
      { ...peer("b", 1), uploadBytesPerSecond: 400, downloadBytesPerSecond: 400 },
      { ...peer("c", 1), uploadBytesPerSecond: 100, downloadBytesPerSecond: 100, sends: false },
    ];
    // Two senders move 1 + 0·w vectors each, the aux 2w: a's uplink takes 100/50 = 2 s whatever
    // its part; the aux with the whole vector takes 2·100/100 = 2 s, with 3/4 of it 1.5 s.
    expect(predictedAllReduceSeconds(members, [0.25, 0, 0.75], 100)).toBe(2);
    expect(predictedAllReduceSeconds(members, [0, 0, 1], 100)).toBe(2);
    const slowAux = members.map((m) => (m.peerId === "c" ? { ...m, downloadBytesPerSecond: 40 } : m));
    expect(predictedAllReduceSeconds(slowAux, [0.25, 0, 0.75], 100)).toBe(3.75);
  });

  it("refuses a fraction list of the wrong length", () => {
    expect(() => predictedAllReduceSeconds([peer("a", 1)], [0.5, 0.5], 10)).toThrow(
      expect.objectContaining({ code: SwarmErrorCode.LENGTH_MISMATCH }),
    );
  });
});
