import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import {
  GossipProgressTransport,
  progressTopic,
  type ProgressRejection,
} from "../../src/progress/progress-gossip.ts";
import type { LocalProgress } from "../../src/progress/progress-tracker.ts";
import { ProgressTracker, type ImplausibleRecord } from "../../src/progress/progress-tracker.ts";
import { MAX_EPOCH_LEAD } from "../../src/progress/record-plausibility.ts";
import { eventually, startNode, TestAuthority, type TestNodeOptions } from "../support/swarm-fixtures.ts";

/**
 * A volunteer with a valid trainer pass gossips correctly signed progress records that claim what
 * no trainer could: a step a million epochs ahead (it would become the run's step on the loss
 * curve), 2^47 samples (the estimate, the leaders' wait, the leaderboard), 10^9 samples/s (the
 * swarm's throughput). The honest members refuse each record, do not forward it, hold it against
 * its sender, and their view of the swarm stays what the honest trainers report. A volunteer
 * really ten times faster than the others is believed.
 */

const nodes: SwarmNode[] = [];
const trackers: ProgressTracker[] = [];
afterEach(async () => {
  for (const tracker of trackers.splice(0)) tracker.stop();
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

interface Member {
  readonly node: SwarmNode;
  readonly tracker: ProgressTracker;
  readonly rejected: Array<{ origin: string; reason: ProgressRejection }>;
  readonly implausible: ImplausibleRecord[];
}

/** A member on real libp2p and gossip that dials only its bootstrap peer (a line of members). */
async function member(
  authority: TestAuthority,
  options: TestNodeOptions = {},
  mode?: () => "aux",
): Promise<Member> {
  const node = await startNode(authority, { maxPeers: 1, ...options, identity: generateKeyPair() });
  nodes.push(node);
  const transport = new GossipProgressTransport({
    pubsub: node.libp2p.services.pubsub,
    topic: progressTopic(authority.experimentId),
    self: node.peerId,
    passes: node.passes,
    currentPass: () => node.passHolder.token(),
  });
  const rejected: Member["rejected"] = [];
  transport.onRejected((origin, reason) => rejected.push({ origin, reason }));
  const tracker = new ProgressTracker({
    transport,
    targetBatchSize: 10_000,
    intervalMs: 200,
    ...(mode === undefined ? {} : { mode }),
  });
  const implausible: ImplausibleRecord[] = [];
  tracker.onImplausible((refused) => implausible.push(refused));
  tracker.start();
  trackers.push(tracker);
  return { node, tracker, rejected, implausible };
}

function heard(listener: Member, origin: Member): boolean {
  return listener.tracker.records().some((r) => r.peerId === origin.node.peerId);
}

const HONEST: LocalProgress = { epoch: 50, samplesAccumulated: 120, samplesPerSecond: 40 };

describe("implausible progress records from a member with a valid pass (real libp2p and gossip)", () => {
  it("are refused, not forwarded, and counted against the sender; the swarm's view is the honest one", async () => {
    const authority = new TestAuthority();
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    // Nobody is judged against one other member alone: bob needs two honest references.
    const c = await member(authority, { username: "carol", bootstrap: a.node.multiaddrs() });
    for (const honest of [a, b, c]) honest.tracker.report(HONEST);
    await eventually(
      () => heard(a, b) && heard(b, a) && heard(b, c) && heard(c, b),
      "the honest members hear each other",
    );

    const claims: Array<[string, LocalProgress]> = [
      ["a step a million epochs ahead", { ...HONEST, epoch: 1_000_050, lossSum: 0.001, minibatches: 1 }],
      ["2^47 samples", { ...HONEST, samplesAccumulated: 2 ** 47 }],
      ["10^9 samples/s", { ...HONEST, samplesPerSecond: 1e9 }],
    ];
    const hostile: Member[] = [];
    for (const [, claim] of claims) {
      // Each hostile member reaches alice only through bob, who must not relay its lie.
      const mallory = await member(authority, { username: "mallory", bootstrap: b.node.multiaddrs() });
      hostile.push(mallory);
      mallory.tracker.report(claim);
    }
    await eventually(
      () =>
        hostile.every((mallory) =>
          b.rejected.some((r) => r.origin === mallory.node.peerId && r.reason === "implausible"),
        ),
      "bob refused every implausible record",
      20_000,
    );
    // A while of republishing (every 200 ms): still nothing reached anyone.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    for (const [i, mallory] of hostile.entries()) {
      expect(heard(a, mallory), claims[i]?.[0]).toBe(false);
      expect(heard(b, mallory), claims[i]?.[0]).toBe(false);
      const refusals = b.implausible.filter((r) => r.peerId === mallory.node.peerId);
      expect(refusals.length, claims[i]?.[0]).toBeGreaterThan(1);
      expect(refusals.at(-1)?.count).toBe(refusals.length);
      expect(refusals[0]?.username).toBe("mallory");
    }
    expect(b.implausible.find((r) => r.peerId === hostile[0]?.node.peerId)?.reason).toMatch(
      /epoch 1000050 is past the swarm's/,
    );
    expect(b.implausible.find((r) => r.peerId === hostile[1]?.node.peerId)?.reason).toMatch(
      /more samples in .* over the throughput bound/,
    );
    expect(b.implausible.find((r) => r.peerId === hostile[2]?.node.peerId)?.reason).toMatch(
      /samples\/s is over 64× the other trainers'/,
    );
    for (const honest of [a, b, c]) {
      const view = honest.tracker.snapshot();
      expect(view.epoch).toBe(50);
      expect(view.alivePeers).toBe(3);
      expect(view.samplesPerSecond).toBe(120);
      expect(view.samplesAccumulated).toBeLessThan(10_000);
    }
    expect(a.rejected).toEqual([]);
    expect(a.implausible).toEqual([]);
  }, 60_000);

  it("a contributed total that jumps past the samples its sender announced is refused", async () => {
    const authority = new TestAuthority();
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    const c = await member(authority, { username: "carol", bootstrap: a.node.multiaddrs() });
    for (const honest of [a, b, c]) honest.tracker.report({ ...HONEST, samplesTotal: 5_000 });
    await eventually(() => heard(a, b) && heard(b, a) && heard(b, c), "the honest members hear each other");
    const mallory = await member(authority, { username: "mallory", bootstrap: b.node.multiaddrs() });
    mallory.tracker.report({ ...HONEST, samplesTotal: 5_000 });
    await eventually(() => heard(a, mallory), "alice hears mallory's honest record through bob");
    // A step's worth more is believed; 2^47 more (the leaderboard's credit) is not.
    mallory.tracker.report({ ...HONEST, epoch: 51, samplesAccumulated: 0, samplesTotal: 5_120 });
    await eventually(
      () =>
        a.tracker.records().some((r) => r.peerId === mallory.node.peerId && r.record.samplesTotal === 5_120),
      "alice has mallory's next total",
    );
    mallory.tracker.report({ ...HONEST, epoch: 51, samplesAccumulated: 40, samplesTotal: 2 ** 47 });
    await eventually(
      () => b.implausible.some((r) => r.peerId === mallory.node.peerId),
      "bob refused the inflated total",
    );
    expect(b.implausible.find((r) => r.peerId === mallory.node.peerId)?.reason).toMatch(
      /more contributed samples is over what it announced/,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    for (const honest of [a, b, c]) {
      const totals = honest.tracker
        .records()
        .filter((r) => r.peerId === mallory.node.peerId)
        .map((r) => r.record.samplesTotal);
      expect(totals.every((total) => total === undefined || total <= 5_120)).toBe(true);
    }
  }, 60_000);

  it("believe a volunteer ten times faster than the others", async () => {
    const authority = new TestAuthority();
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    const gpu = await member(authority, { username: "gpu", bootstrap: b.node.multiaddrs() });
    a.tracker.report(HONEST);
    b.tracker.report(HONEST);
    await eventually(() => heard(a, b) && heard(b, a), "the honest members hear each other");
    gpu.tracker.report({ epoch: 50, samplesAccumulated: 1_200, samplesPerSecond: 400 });
    await eventually(() => heard(a, gpu), "alice hears the fast volunteer through bob");
    // Its samples grow at its pace, record after record.
    for (let i = 1; i <= 5; i++) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      gpu.tracker.report({ epoch: 50, samplesAccumulated: 1_200 + i * 120, samplesPerSecond: 400 });
    }
    await eventually(
      () =>
        a.tracker
          .records()
          .some((r) => r.peerId === gpu.node.peerId && r.record.samplesAccumulated === 1_800),
      "alice has the fast volunteer's latest record",
    );
    expect(a.tracker.snapshot().samplesPerSecond).toBe(480);
    expect([...a.implausible, ...b.implausible]).toEqual([]);
    expect([...a.rejected, ...b.rejected]).toEqual([]);
  }, 60_000);

  it("are refused by a trainer with one other trainer beside it: its own record is a reference", async () => {
    const authority = new TestAuthority();
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    const holdingState = { ...HONEST, stateHash: { epoch: 50, digest: "0123456789abcdef" } };
    for (const honest of [a, b]) honest.tracker.report(holdingState);
    await eventually(() => heard(a, b) && heard(b, a), "the honest members hear each other");
    // Mallory reaches bob directly: bob holds alice's record and its own, two references.
    const mallory = await member(authority, { username: "mallory", bootstrap: b.node.multiaddrs() });
    mallory.tracker.report({ ...HONEST, epoch: 1_000_050, lossSum: 0.001, minibatches: 1 });
    await eventually(
      () => b.implausible.some((r) => r.peerId === mallory.node.peerId),
      "bob refused mallory's step a million ahead",
      20_000,
    );
    expect(heard(b, mallory)).toBe(false);
    expect(heard(a, mallory)).toBe(false);
    expect(b.tracker.snapshot().epoch).toBe(50);
  }, 60_000);

  it("from two colluding keys that take turns claiming the other's epoch plus the lead stop at the lead", async () => {
    const authority = new TestAuthority();
    const holdingState = { ...HONEST, stateHash: { epoch: 50, digest: "0123456789abcdef" } };
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    const c = await member(authority, { username: "carol", bootstrap: a.node.multiaddrs() });
    for (const honest of [a, b, c]) honest.tracker.report(holdingState);
    await eventually(() => heard(a, b) && heard(b, a) && heard(b, c), "the honest members hear each other");
    // Two keys of one volunteer, both beside bob.
    const keys = [
      await member(authority, { username: "mallory", bootstrap: b.node.multiaddrs() }),
      await member(authority, { username: "mallory", bootstrap: b.node.multiaddrs() }),
    ];
    const highestHeard = () =>
      Math.max(
        0,
        ...b.tracker
          .records()
          .filter((r) => keys.some((key) => key.node.peerId === r.peerId))
          .map((r) => r.record.epoch),
      );
    // Each key in turn claims the highest epoch bob believes plus the lead.
    const believed: number[] = [];
    for (let turn = 0; turn < 6; turn++) {
      const key = keys[turn % 2] as Member;
      const claim = Math.max(50, highestHeard()) + MAX_EPOCH_LEAD;
      key.tracker.report({ ...HONEST, epoch: claim, lossSum: 0.001, minibatches: 1 });
      const isBelieved = () =>
        b.tracker.records().some((r) => r.peerId === key.node.peerId && r.record.epoch === claim);
      await eventually(
        () =>
          isBelieved() ||
          b.implausible.some((r) => r.peerId === key.node.peerId && r.reason.startsWith(`epoch ${claim} `)),
        `bob judged the claim of epoch ${claim}`,
        20_000,
      );
      if (isBelieved()) believed.push(claim);
    }
    // A claim within the lead of the honest 50 is believed; none past it, however the keys take turns.
    expect(believed).toContain(50 + MAX_EPOCH_LEAD);
    expect(Math.max(...believed)).toBe(50 + MAX_EPOCH_LEAD);
    expect(b.implausible.some((r) => r.username === "mallory")).toBe(true);
    expect(Math.max(...a.tracker.records().map((r) => r.record.epoch))).toBeLessThanOrEqual(
      50 + MAX_EPOCH_LEAD,
    );
    expect([...a.implausible, ...b.implausible].every((r) => r.username === "mallory")).toBe(true);
  }, 60_000);

  it("are not judged by a trainer that has not loaded the swarm's state: an honest peer far ahead is believed", async () => {
    const authority = new TestAuthority();
    // Two trainers that just restarted: epoch 0, no state of the swarm's yet.
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    for (const restarted of [a, b]) restarted.tracker.report({ ...HONEST, epoch: 0 });
    await eventually(() => heard(a, b) && heard(b, a), "the restarted members hear each other");
    const ahead = await member(authority, { username: "carol", bootstrap: b.node.multiaddrs() });
    ahead.tracker.report({ ...HONEST, epoch: 200, stateHash: { epoch: 200, digest: "0123456789abcdef" } });
    await eventually(() => heard(b, ahead), "bob believes carol, at the swarm's real step");
    expect(b.implausible).toEqual([]);
  }, 60_000);

  it("are not judged by an aux against trainers that have not loaded the state: it knows the state it serves", async () => {
    const authority = new TestAuthority();
    // The swarm resumed from the aux's checkpoint of epoch 100: every trainer restarted.
    const aux = await member(
      authority,
      { username: "organizer", role: "aux", mode: "aux", maxPeers: 8 },
      () => "aux",
    );
    aux.tracker.report({ epoch: 100, samplesAccumulated: 0, samplesPerSecond: 0, stateEpoch: 100 });
    const a = await member(authority, { username: "alice", bootstrap: aux.node.multiaddrs() });
    const b = await member(authority, { username: "bob", bootstrap: aux.node.multiaddrs() });
    for (const restarted of [a, b]) restarted.tracker.report({ ...HONEST, epoch: 0 });
    await eventually(() => heard(aux, a) && heard(aux, b), "the aux hears the restarted trainers");
    // The first of them to load the checkpoint is at its epoch, a hundred past the others' 0.
    const loaded = await member(authority, { username: "carol", bootstrap: aux.node.multiaddrs() });
    loaded.tracker.report({ ...HONEST, epoch: 100, stateHash: { epoch: 100, digest: "0123456789abcdef" } });
    await eventually(() => heard(aux, loaded), "the aux believes carol, at the checkpoint's epoch");
    // A step past the state it serves is still refused.
    const mallory = await member(authority, { username: "mallory", bootstrap: aux.node.multiaddrs() });
    mallory.tracker.report({ ...HONEST, epoch: 1_000_100 });
    await eventually(() => aux.implausible.length > 0, "the aux refused mallory's step", 20_000);
    expect(aux.implausible.map((refused) => refused.peerId)).toEqual([mallory.node.peerId]);
  }, 60_000);
});
