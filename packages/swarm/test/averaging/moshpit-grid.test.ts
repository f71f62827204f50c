import { describe, expect, it } from "vitest";
import { moshpitDimensions } from "../../src/averaging/group-size.ts";
import {
  groupKey,
  initialGridIndex,
  nextGridIndex,
  parseGroupKey,
} from "../../src/averaging/moshpit-grid.ts";
import { seededRandom as seeded } from "../support/seeded-random.ts";

interface SimPeer {
  id: number;
  index: number[];
  value: number;
}

/**
 * One Moshpit round: peers meet under their group key in a random order (as a matchmaking leader
 * shuffles its group), a group larger than m is cut into chunks of m (matchmaking caps group
 * size), each group averages exactly, and every member moves on with its position in the group
 * as its new last coordinate. Returns the groups.
 */
function runRound(
  peers: SimPeer[],
  epoch: number,
  round: number,
  m: number,
  random: () => number,
): SimPeer[][] {
  const byKey = new Map<string, SimPeer[]>();
  for (const peer of peers) {
    const key = groupKey(epoch, round, peer.index);
    byKey.set(key, [...(byKey.get(key) ?? []), peer]);
  }
  const groups: SimPeer[][] = [];
  for (const members of byKey.values()) {
    members.sort((a, b) => a.id - b.id);
    for (let i = members.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [members[i], members[j]] = [members[j] as SimPeer, members[i] as SimPeer];
    }
    for (let start = 0; start < members.length; start += m) groups.push(members.slice(start, start + m));
  }
  for (const group of groups) {
    const mean = group.reduce((sum, p) => sum + p.value, 0) / group.length;
    group.forEach((peer, position) => {
      peer.value = mean;
      peer.index = nextGridIndex(peer.index, position);
    });
  }
  return groups;
}

function spread(peers: readonly SimPeer[]): number {
  const values = peers.map((p) => p.value);
  return Math.max(...values) - Math.min(...values);
}

function mean(peers: readonly SimPeer[]): number {
  return peers.reduce((sum, p) => sum + p.value, 0) / peers.length;
}

/** m^d peers, each at its own cell: index = its first d − 1 base-m digits. */
function fullGrid(m: number, d: number, random: () => number): SimPeer[] {
  return Array.from({ length: m ** d }, (_, id) => {
    const digits = Array.from({ length: d }, (_, k) => Math.floor(id / m ** k) % m);
    return { id, index: digits.slice(0, d - 1), value: random() * 100 - 50 };
  });
}

describe("groupKey", () => {
  it("names epoch, round and coordinates", () => {
    expect(groupKey(12, 0, [3, 1])).toBe("e12/r0/3.1");
    expect(groupKey(12, 1, [3, 1])).not.toBe(groupKey(12, 0, [3, 1]));
    expect(groupKey(13, 0, [3, 1])).not.toBe(groupKey(12, 0, [3, 1]));
    expect(groupKey(12, 0, [31])).not.toBe(groupKey(12, 0, [3, 1]));
  });

  it("gives every peer the same key when the grid has one dimension", () => {
    const random = seeded(1);
    const keys = new Set(Array.from({ length: 10 }, () => groupKey(5, 0, initialGridIndex(1, 16, random))));
    expect([...keys]).toEqual(["e5/r0/"]);
  });

  it("refuses coordinates that are not whole numbers", () => {
    expect(() => groupKey(1, 0, [1.5])).toThrow(RangeError);
    expect(() => groupKey(-1, 0, [])).toThrow(RangeError);
    expect(() => groupKey(1, 0, [], -1)).toThrow(RangeError);
  });

  it("names the run generation after a rollback, so the same epoch gets new groups", () => {
    expect(groupKey(12, 0, [], 0)).toBe("e12/r0/");
    expect(groupKey(12, 0, [], 2)).toBe("g2/e12/r0/");
    expect(groupKey(12, 0, [3, 1], 1)).not.toBe(groupKey(12, 0, [3, 1], 0));
  });
});

describe("parseGroupKey", () => {
  it("reads back what groupKey writes", () => {
    expect(parseGroupKey(groupKey(7, 0, []))).toEqual({
      generation: 0,
      epoch: 7,
      round: 0,
      wholeSwarm: true,
    });
    expect(parseGroupKey(groupKey(7, 1, [2, 0], 3))).toEqual({
      generation: 3,
      epoch: 7,
      round: 1,
      wholeSwarm: false,
    });
    expect(parseGroupKey(groupKey(7, 0, [4], 1))?.wholeSwarm).toBe(false);
  });

  it("answers undefined for keys of another shape", () => {
    for (const key of ["", "e7", "x/e7/r0/", "g/e7/r0/", "e7/r0/a", "e7/r0/ trailing", "g1/g2/e7/r0/"])
      expect(parseGroupKey(key)).toBeUndefined();
  });
});

describe("initialGridIndex", () => {
  it("draws d − 1 coordinates uniformly from [0, m)", () => {
    const random = seeded(42);
    const counts = new Array<number>(5).fill(0);
    for (let i = 0; i < 5000; i++) {
      const index = initialGridIndex(3, 5, random);
      expect(index).toHaveLength(2);
      for (const c of index) counts[c] = (counts[c] ?? 0) + 1;
    }
    for (const count of counts) expect(Math.abs(count - 2000)).toBeLessThan(150);
    expect(initialGridIndex(4, 7, () => 0.999999999)).toEqual([6, 6, 6]);
  });

  it("refuses a random source outside [0, 1)", () => {
    expect(() => initialGridIndex(2, 4, () => 1)).toThrow(RangeError);
    expect(() => initialGridIndex(0, 4, Math.random)).toThrow(RangeError);
  });
});

describe("nextGridIndex", () => {
  it("drops the first coordinate and appends the part index", () => {
    expect(nextGridIndex([3, 1], 4)).toEqual([1, 4]);
    expect(nextGridIndex([2], 0)).toEqual([0]);
    expect(nextGridIndex([], 3)).toEqual([]);
    expect(() => nextGridIndex([1], -1)).toThrow(RangeError);
  });
});

describe("Moshpit averaging over the grid (simulation)", () => {
  it.each([
    [3, 3],
    [4, 2],
    [2, 5],
    [5, 1],
  ])("on a full %i^%i grid, d rounds give every peer the exact global mean (Theorem 1)", (m, d) => {
    expect(moshpitDimensions(m ** d, m)).toBe(d);
    const random = seeded(m * 10 + d);
    const peers = fullGrid(m, d, random);
    const target = mean(peers);
    for (let round = 0; round < d; round++) {
      if (round > 0) expect(spread(peers)).toBeGreaterThan(1e-6); // not done before round d
      const groups = runRound(peers, 7, round, m, random);
      expect(groups).toHaveLength(m ** (d - 1));
      for (const group of groups) expect(group).toHaveLength(m);
    }
    for (const peer of peers) expect(peer.value).toBeCloseTo(target, 10);
  });

  it("sends the members of one group to different groups in the next round", () => {
    const random = seeded(3);
    const peers = fullGrid(4, 3, random);
    const first = runRound(peers, 0, 0, 4, random);
    const next = new Map(peers.map((p) => [p.id, groupKey(0, 1, p.index)]));
    for (const group of first) expect(new Set(group.map((p) => next.get(p.id))).size).toBe(group.length);
  });

  it("shrinks the spread round after round on a partly filled grid with random indices", () => {
    const random = seeded(2024);
    const m = 5;
    const n = 90; // 90 of 125 cells
    const d = moshpitDimensions(n, m);
    expect(d).toBe(3);
    const peers: SimPeer[] = Array.from({ length: n }, (_, id) => ({
      id,
      index: initialGridIndex(d, m, random),
      value: random() * 100,
    }));
    const target = mean(peers);
    const spreads = [spread(peers)];
    for (let round = 0; round < 12; round++) {
      runRound(peers, 3, round, m, random);
      spreads.push(spread(peers));
    }
    // Averages never widen the spread; with this seed it also shrinks in every single round
    // (a round can stall when the extreme peers happen to sit in groups of one).
    for (let i = 1; i < spreads.length; i++) expect(spreads[i]).toBeLessThan(spreads[i - 1] ?? 0);
    expect(spreads.at(-1)).toBeLessThan((spreads[0] ?? 0) * 1e-3);
    expect(mean(peers)).toBeCloseTo(target, 10); // group averages keep the global mean
  });
});
