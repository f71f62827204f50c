import { afterEach, describe, expect, it } from "vitest";
import { SwarmErrorCode } from "../../src/errors.ts";
import { Matchmaking, type MemberOffer } from "../../src/averaging/matchmaking.ts";
import { MemoryRpcNetwork } from "../support/memory-rpc.ts";
import { silentLogger } from "../support/swarm-fixtures.ts";

/** Matchmaking over the in-memory rpc: who leads, who is waited for, and how retries meet again. */

const offer: MemberOffer = {
  mode: "node",
  weight: 10,
  uploadBytesPerSecond: 1e6,
  downloadBytesPerSecond: 1e6,
};

const started: Matchmaking[] = [];
afterEach(() => {
  for (const matchmaking of started.splice(0)) matchmaking.stop();
});

/**
 * Peers "a" (the leader: lowest id) and "b"; `expected` is what each one's progress says, and
 * `willJoin` whether each may still ask for a key it is not asking for yet (default: yes).
 */
function pair(
  expected: { a: string[]; b: string[] },
  timeoutMs = 300,
  willJoin: { a?: (key: string) => boolean; b?: (key: string) => boolean } = {},
  now?: () => number,
) {
  const network = new MemoryRpcNetwork();
  const make = (self: "a" | "b", other: "a" | "b") => {
    const join = willJoin[self];
    const matchmaking = new Matchmaking({
      rpc: network.add(self),
      logger: silentLogger,
      leaders: () => [other],
      expected: () => expected[self],
      ...(join === undefined ? {} : { willJoin: join }),
      maxGroupSize: 16,
      timeoutMs,
      ...(now === undefined ? {} : { now }),
    });
    matchmaking.start();
    started.push(matchmaking);
    return matchmaking;
  };
  return { a: make("a", "b"), b: make("b", "a") };
}

describe("Matchmaking", () => {
  it("forms one group for everyone expected, with the same id and members on each side", async () => {
    const { a, b } = pair({ a: ["b"], b: ["a"] }, 5_000);
    const [ga, gb] = await Promise.all([a.form("e3/r0/", offer), b.form("e3/r0/", offer)]);
    expect(ga.groupId).toBe(gb.groupId);
    expect(ga.members.map((m) => m.peerId)).toEqual(["a", "b"]);
    expect(gb.members.map((m) => m.peerId)).toEqual(["a", "b"]);
  });

  it("lets a peer that found nobody retry under the same key and meet a newcomer", async () => {
    // The leader tried alone (the other peer was still catching up), then both ask for the key.
    const expected = { a: [] as string[], b: ["a"] };
    const { a, b } = pair(expected);
    await expect(a.form("e7/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    expected.a = ["b"]; // b has caught up: its progress is at the epoch now
    const [ga, gb] = await Promise.all([a.form("e7/r0/", offer), b.form("e7/r0/", offer)]);
    expect(ga.groupId).toBe(gb.groupId);
    expect(ga.members).toHaveLength(2);
  });

  it("the same holds when the follower is the one who found nobody first", async () => {
    const expected = { a: [] as string[], b: [] as string[] };
    const { a, b } = pair(expected);
    await expect(b.form("e7/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    expected.a = ["b"];
    const [ga, gb] = await Promise.all([a.form("e7/r0/", offer), b.form("e7/r0/", offer)]);
    expect(gb.groupId).toBe(ga.groupId);
    expect(gb.members).toHaveLength(2);
  });

  it("gives members retrying after a failed round a new group of their own", async () => {
    const { a, b } = pair({ a: ["b"], b: ["a"] }, 5_000);
    const [first] = await Promise.all([a.form("e1/r0/", offer), b.form("e1/r0/", offer)]);
    // Their all-reduce failed; both ask again for the same key.
    const [ra, rb] = await Promise.all([a.form("e1/r0/", offer), b.form("e1/r0/", offer)]);
    expect(ra.groupId).toBe(rb.groupId);
    expect(ra.groupId).not.toBe(first.groupId);
    expect(ra.members.map((m) => m.peerId)).toEqual(["a", "b"]);
  });

  // The deadline is an hour: these tests finish only if nobody waits for it.
  const HOUR = 3_600_000;

  it("answers a peer asking for an epoch the leader has finished at once, with no group", async () => {
    const { b } = pair({ a: ["b"], b: ["a"] }, HOUR, { a: (key) => key !== "e4/r0/" });
    await expect(b.form("e4/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
  });

  it("still waits for a leader that may join the key", async () => {
    const { a, b } = pair({ a: ["b"], b: ["a"] }, HOUR);
    const late = b.form("e4/r0/", offer);
    let settled = false;
    void late.then(
      () => (settled = true),
      () => (settled = true),
    );
    for (let i = 0; i < 50; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    const [ga, gb] = await Promise.all([a.form("e4/r0/", offer), late]);
    expect(gb.groupId).toBe(ga.groupId);
  });

  it("stops waiting for an expected member once its progress has moved past the key", async () => {
    // The leader expects b from b's last record; b has in fact stepped on alone and will not come.
    const expected = { a: ["b"], b: [] as string[] };
    const { a } = pair(expected, HOUR);
    const alone = a.form("e4/r0/", offer);
    let settled = false;
    void alone.catch(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(settled).toBe(false);
    expected.a = []; // b's next record arrives: it is past epoch 4
    await expect(alone).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
  });

  it("after gatherings where everyone came at once, waits seconds for an expected member that never comes", async () => {
    const { a, b } = pair({ a: ["b"], b: ["a"] }, HOUR);
    expect(a.gatheringDeadlineMs).toBe(HOUR);
    for (const epoch of [1, 2, 3])
      await Promise.all([a.form(`e${epoch}/r0/`, offer), b.form(`e${epoch}/r0/`, offer)]);
    expect(a.gatheringDeadlineMs).toBe(5_000);
    // b's progress still expects it at epoch 4, but b died: the leader gives up on it in seconds,
    // where the config's timeout is an hour.
    await expect(a.form("e4/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
  }, 20_000);

  it("waits longer once a member came after its group had closed", async () => {
    let clock = 0;
    const expected = { a: ["b"], b: ["a"] };
    let aJoins = (_key: string) => true;
    const { a, b } = pair(expected, 20_000, { a: (key) => aJoins(key) }, () => clock);
    for (const epoch of [1, 2, 3])
      await Promise.all([a.form(`e${epoch}/r0/`, offer), b.form(`e${epoch}/r0/`, offer)]);
    expect(a.gatheringDeadlineMs).toBe(5_000);
    // Epoch 4: the leader expects nobody (b's record is behind) and goes on alone…
    expected.a = [];
    await expect(a.form("e4/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    // …and b, 3 s behind, asks for the key after its group closed.
    clock += 3_000;
    expected.a = ["b"];
    aJoins = (key) => key !== "e4/r0/";
    await expect(b.form("e4/r0/", offer)).rejects.toMatchObject({ code: SwarmErrorCode.NO_GROUP });
    expect(a.gatheringDeadlineMs).toBe(2_000 + 3 * 3_000);
  });

  it("keeps the members that could not reach the lowest peer together under the next one", async () => {
    // "a" has the lowest id but is gone (frozen: its connections look open, nothing answers). "b"
    // and "c" both skip it; "b" must not send "c" back to "a", or they split into groups of one.
    const network = new MemoryRpcNetwork();
    const make = (self: string, others: string[]) => {
      const matchmaking = new Matchmaking({
        rpc: network.add(self),
        logger: silentLogger,
        leaders: () => others,
        expected: () => others.filter((other) => other !== "a"),
        maxGroupSize: 16,
        timeoutMs: 2_000,
      });
      matchmaking.start();
      started.push(matchmaking);
      return matchmaking;
    };
    const b = make("b", ["a", "c"]);
    const c = make("c", ["a", "b"]);
    const [gb, gc] = await Promise.all([b.form("e9/r0/", offer), c.form("e9/r0/", offer)]);
    expect(gc.groupId).toBe(gb.groupId);
    expect(gb.members.map((m) => m.peerId)).toEqual(["b", "c"]);
  });

  it("reaches the lowest live peer past more unreachable keys than it follows redirects", async () => {
    // Twelve keys below "b" and "c" publish progress and serve nothing (phantoms in their first
    // seconds, before they count as having contributed nothing): each is skipped once.
    const phantoms = Array.from({ length: 12 }, (_, i) => `a${String(i).padStart(2, "0")}`);
    const network = new MemoryRpcNetwork();
    const make = (self: string, other: string) => {
      const matchmaking = new Matchmaking({
        rpc: network.add(self),
        logger: silentLogger,
        leaders: () => [...phantoms, other],
        expected: () => [other],
        maxGroupSize: 16,
        timeoutMs: 2_000,
      });
      matchmaking.start();
      started.push(matchmaking);
      return matchmaking;
    };
    const b = make("b", "c");
    const c = make("c", "b");
    const [gb, gc] = await Promise.all([b.form("e2/r0/", offer), c.form("e2/r0/", offer)]);
    expect(gc.groupId).toBe(gb.groupId);
    expect(gb.members.map((m) => m.peerId)).toEqual(["b", "c"]);
  });

  describe("a member that asks again for a key with no group to exclude (its answer was lost, or it restarted)", () => {
    // "a" leads and stays up; "b" is started again under the same id, knowing nothing of its groups.
    function withRestarts(timeoutMs: number) {
      let clock = 0;
      const network = new MemoryRpcNetwork();
      const make = (self: "a" | "b", other: "a" | "b") => {
        const matchmaking = new Matchmaking({
          rpc: network.add(self),
          logger: silentLogger,
          leaders: () => [other],
          expected: () => [other],
          maxGroupSize: 16,
          timeoutMs,
          now: () => clock,
        });
        matchmaking.start();
        started.push(matchmaking);
        return matchmaking;
      };
      return {
        a: make("a", "b"),
        b: make("b", "a"),
        restartB: () => make("b", "a"),
        advance: (ms: number) => (clock += ms),
      };
    }

    it("gets the group it is in while that group's round may still run", async () => {
      const { a, b, restartB, advance } = withRestarts(5_000);
      const [first] = await Promise.all([a.form("e5/r0/", offer), b.form("e5/r0/", offer)]);
      advance(1_000);
      const again = await restartB().form("e5/r0/", offer);
      expect(again.groupId).toBe(first.groupId);
    });

    it("gets a new group once the swarm came back to the key after the group's time (a resume from a checkpoint)", async () => {
      const { a, b, restartB, advance } = withRestarts(5_000);
      const [first] = await Promise.all([a.form("e5/r0/", offer), b.form("e5/r0/", offer)]);
      advance(60_000);
      const restarted = restartB();
      const [ga, gb] = await Promise.all([a.form("e5/r0/", offer), restarted.form("e5/r0/", offer)]);
      expect(gb.groupId).toBe(ga.groupId);
      expect(gb.groupId).not.toBe(first.groupId);
      expect(gb.members.map((m) => m.peerId)).toEqual(["a", "b"]);
    });

    it("gets a new group when its offer is not the one the group holds (its all-reduce would refuse the weight)", async () => {
      const { a, b, restartB, advance } = withRestarts(5_000);
      const [first] = await Promise.all([a.form("e5/r0/", offer), b.form("e5/r0/", offer)]);
      advance(1_000);
      const restarted = restartB();
      const heavier = { ...offer, weight: offer.weight + 7 };
      const [ga, gb] = await Promise.all([a.form("e5/r0/", offer), restarted.form("e5/r0/", heavier)]);
      expect(gb.groupId).toBe(ga.groupId);
      expect(gb.groupId).not.toBe(first.groupId);
      expect(gb.members.find((m) => m.peerId === "b")?.weight).toBe(offer.weight + 7);
    });
  });
});
