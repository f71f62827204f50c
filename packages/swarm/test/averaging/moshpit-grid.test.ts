import { describe, expect, it } from "vitest";
import { moshpitDimensions } from "../../src/averaging/group-size.ts";
import { optimalGroupSize } from "../../src/averaging/group-size.ts";
import { groupKey, parseGroupKey, planGrid, type GridPlan } from "../../src/averaging/moshpit-grid.ts";
import { seededRandom as seeded } from "../support/seeded-random.ts";

interface SimPeer {
  id: string;
  value: number;
  weight: number;
}

const peerIds = (n: number) => Array.from({ length: n }, (_, i) => `peer-${String(i).padStart(4, "0")}`);

/**
 * One Moshpit round as the swarm runs it: every peer asks for the key of its planned cell, the
 * peers under one key form one group, and each group averages exactly, weighted by the weights its
 * members bring this round (a left-over peer brings none after round 0); every member carries the
 * group's total weight on. Returns the groups' sizes.
 */
function runRound(peers: SimPeer[], plan: GridPlan, epoch: number, round: number): number[] {
  const byKey = new Map<string, SimPeer[]>();
  for (const peer of peers) {
    const key = groupKey(epoch, round, plan.cellOf(peer.id, round) ?? []);
    byKey.set(key, [...(byKey.get(key) ?? []), peer]);
  }
  for (const [key, members] of byKey) {
    const parsed = parseGroupKey(key);
    expect(parsed).toBeDefined();
    // The plan's member list of the key is exactly who asked for it: a leader knows whom to wait for.
    expect(plan.membersOf(round, parsed?.cell ?? [])).toEqual(members.map((peer) => peer.id).sort());
    const weights = members.map((peer) => (plan.contributesIn(peer.id, round) ? peer.weight : 0));
    const total = weights.reduce((sum, weight) => sum + weight, 0);
    const mean = members.reduce((sum, peer, i) => sum + peer.value * (weights[i] ?? 0), 0) / total;
    for (const peer of members) {
      peer.value = mean;
      peer.weight = total;
    }
  }
  return [...byKey.values()].map((members) => members.length);
}

function spread(peers: readonly SimPeer[]): number {
  const values = peers.map((p) => p.value);
  return Math.max(...values) - Math.min(...values);
}

function weightedMean(peers: readonly SimPeer[]): number {
  const total = peers.reduce((sum, p) => sum + p.weight, 0);
  return peers.reduce((sum, p) => sum + p.value * p.weight, 0) / total;
}

describe("groupKey", () => {
  it("names epoch, round and coordinates", () => {
    expect(groupKey(12, 0, [3, 1])).toBe("e12/r0/3.1");
    expect(groupKey(12, 1, [3, 1])).not.toBe(groupKey(12, 0, [3, 1]));
    expect(groupKey(13, 0, [3, 1])).not.toBe(groupKey(12, 0, [3, 1]));
    expect(groupKey(12, 0, [31])).not.toBe(groupKey(12, 0, [3, 1]));
  });

  it("gives every peer the same key when the grid has one dimension", () => {
    const plan = planGrid(peerIds(10), 16);
    const keys = new Set(plan.peers.map((peer) => groupKey(5, 0, plan.cellOf(peer, 0) ?? [9])));
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
      cell: [],
      wholeSwarm: true,
    });
    expect(parseGroupKey(groupKey(7, 1, [2, 0], 3))).toEqual({
      generation: 3,
      epoch: 7,
      round: 1,
      cell: [2, 0],
      wholeSwarm: false,
    });
    expect(parseGroupKey(groupKey(7, 0, [4], 1))?.wholeSwarm).toBe(false);
  });

  it("answers undefined for keys of another shape", () => {
    for (const key of ["", "e7", "x/e7/r0/", "g/e7/r0/", "e7/r0/a", "e7/r0/ trailing", "g1/g2/e7/r0/"])
      expect(parseGroupKey(key)).toBeUndefined();
  });
});

describe("planGrid: Moshpit averaging over the grid", () => {
  it.each([
    [3, 3],
    [4, 2],
    [2, 5],
    [5, 1],
    [8, 2],
  ])(
    "on a full %i^%i grid, d rounds of groups of m give every peer the exact global mean (Theorem 1)",
    (m, d) => {
      const random = seeded(m * 10 + d);
      const peers = peerIds(m ** d).map((id) => ({
        id,
        value: random() * 100 - 50,
        weight: 1 + random() * 9,
      }));
      const plan = planGrid(
        [...peers].reverse().map((peer) => peer.id),
        m,
      );
      expect(plan.dimensions).toBe(d);
      const target = weightedMean(peers);
      for (let round = 0; round < d; round++) {
        if (round > 0) expect(spread(peers)).toBeGreaterThan(1e-6); // not done before round d
        const sizes = runRound(peers, plan, 7, round);
        expect(sizes).toEqual(Array.from({ length: m ** (d - 1) }, () => m));
      }
      for (const peer of peers) expect(peer.value).toBeCloseTo(target, 9);
    },
  );

  it.each([17, 20, 37, 61, 63, 64, 65, 90, 200])(
    "with %i trainers in groups of the size Appendix C prescribes, every peer ends with the exact weighted mean",
    (n) => {
      const random = seeded(n);
      const m = optimalGroupSize(n, 0.01, 16);
      const peers = peerIds(n).map((id) => ({ id, value: random() * 100, weight: 1 + random() * 9 }));
      const plan = planGrid(
        peers.map((peer) => peer.id),
        m,
      );
      expect(plan.dimensions).toBe(moshpitDimensions(n, m));
      const target = weightedMean(peers);
      for (let round = 0; round < plan.dimensions; round++) {
        const sizes = runRound(peers, plan, 3, round);
        // Groups hold m peers, and a few left-over peers at most ⌈…⌉ more in round 0 and later.
        for (const size of sizes) {
          expect(size).toBeGreaterThanOrEqual(Math.min(m, plan.radices[round] ?? m));
          expect(size).toBeLessThanOrEqual(2 * m);
        }
      }
      for (const peer of peers) expect(peer.value).toBeCloseTo(target, 9);
    },
  );

  it("sends the members of one group to different groups in the next round", () => {
    const plan = planGrid(peerIds(64), 4);
    expect(plan.dimensions).toBe(3);
    for (let round = 0; round + 1 < plan.dimensions; round++) {
      const groups = new Map<string, string[]>();
      for (const peer of plan.peers) {
        const key = groupKey(0, round, plan.cellOf(peer, round) ?? []);
        groups.set(key, [...(groups.get(key) ?? []), peer]);
      }
      for (const group of groups.values()) {
        const next = new Set(group.map((peer) => groupKey(0, round + 1, plan.cellOf(peer, round + 1) ?? [])));
        expect(next.size).toBe(group.length);
      }
    }
  });

  it("places every peer alike whatever order it learned the trainers in, and one group for a small swarm", () => {
    const ids = peerIds(30);
    const a = planGrid(ids, 6);
    const b = planGrid([...ids].reverse(), 6);
    for (const peer of ids) {
      for (let round = 0; round < a.dimensions; round++)
        expect(a.cellOf(peer, round)).toEqual(b.cellOf(peer, round));
    }
    const small = planGrid(peerIds(5), 8);
    expect(small.dimensions).toBe(1);
    expect(small.cellOf("peer-0003", 0)).toEqual([]);
    expect(small.membersOf(0, [])).toEqual(peerIds(5));
    expect(small.cellOf("someone-else", 0)).toBeUndefined();
  });
});
