import { generateKeyPair, type KeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import {
  GossipProgressTransport,
  progressTopic,
  type ProgressRejection,
} from "../../src/progress/progress-gossip.ts";
import type { ProgressMode } from "../../src/progress/progress-messages.ts";
import { ProgressTracker } from "../../src/progress/progress-tracker.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority, type TestNodeOptions } from "../support/swarm-fixtures.ts";

const nodes: SwarmNode[] = [];
const trackers: ProgressTracker[] = [];
afterEach(async () => {
  for (const tracker of trackers.splice(0)) tracker.stop();
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

interface Member {
  readonly node: SwarmNode;
  readonly identity: KeyPair;
  readonly tracker: ProgressTracker;
  readonly transport: GossipProgressTransport;
  readonly rejected: Array<{ origin: string; reason: ProgressRejection }>;
}

/**
 * A member that dials only its bootstrap peer and no one else (maxPeers 1), so a chain of them is
 * a line: records reach the far end only when the peers between relay them. `pass` is the token
 * its progress messages carry (its own pass unless a test forges one).
 */
async function member(
  authority: TestAuthority,
  options: TestNodeOptions & { pass?: string; gossipPass?: () => string; recordMode?: ProgressMode } = {},
): Promise<Member> {
  const identity = options.identity ?? generateKeyPair();
  const node = await startNode(authority, { maxPeers: 1, ...options, identity });
  nodes.push(node);
  const transport = new GossipProgressTransport({
    pubsub: node.libp2p.services.pubsub,
    topic: progressTopic(authority.experimentId),
    self: node.peerId,
    passes: node.passes,
    currentPass: options.gossipPass ?? (() => node.passHolder.token()),
  });
  const rejected: Member["rejected"] = [];
  transport.onRejected((origin, reason) => rejected.push({ origin, reason }));
  const recordMode = options.recordMode;
  const tracker = new ProgressTracker({
    transport,
    targetBatchSize: 100,
    intervalMs: 200,
    ...(recordMode === undefined ? {} : { mode: () => recordMode }),
  });
  tracker.start();
  trackers.push(tracker);
  return { node, identity, tracker, transport, rejected };
}

function heard(listener: Member, origin: Member, epoch?: number): boolean {
  return listener.tracker
    .records()
    .some((r) => r.peerId === origin.node.peerId && (epoch === undefined || r.record.epoch === epoch));
}

describe("GossipProgressTransport", () => {
  it("brings every peer's record to every other in a line of peers, keyed by the origin's pass", async () => {
    const authority = new TestAuthority();
    const a = await member(authority, { username: "alice" });
    const b = await member(authority, { username: "bob", bootstrap: a.node.multiaddrs() });
    const c = await member(authority, { username: "carol", bootstrap: b.node.multiaddrs() });
    const d = await member(authority, { username: "dave", bootstrap: c.node.multiaddrs() });
    const line = [a, b, c, d];
    line.forEach(({ tracker }, i) => {
      tracker.report({ epoch: 10 + i, samplesAccumulated: i, samplesPerSecond: 0 });
    });
    await eventually(
      () => line.every((listener) => line.every((origin) => listener === origin || heard(listener, origin))),
      "every record reached every peer",
      20_000,
    );
    // The ends are not connected: d's record reached a through c and b.
    expect(a.node.members()).toEqual([b.node.peerId]);
    expect(d.node.members()).toEqual([c.node.peerId]);
    const fromD = a.tracker.records().find((r) => r.peerId === d.node.peerId);
    expect(fromD).toMatchObject({ username: "dave", role: "trainer", record: { epoch: 13 } });
    expect(a.tracker.snapshot()).toMatchObject({ epoch: 13, alivePeers: 4 });
  });

  it("rejects and does not forward records with a forged, expired, another key's or a revoked pass", async () => {
    const authority = new TestAuthority();
    const a = await member(authority);
    const b = await member(authority, { bootstrap: a.node.multiaddrs() });
    const other = generateKeyPair();
    // Each case comes from its own hostile member: a rejected message also costs its sender its
    // standing with b (gossipsub's score), which would hide later cases from the same sender.
    const cases: Array<{ pass: (mallory: KeyPair) => string; reason: ProgressRejection }> = [
      // signed by another authority
      {
        pass: (mallory) => new TestAuthority(authority.experimentId).pass(mallory, { username: "mallory" }),
        reason: "pass",
      },
      // expired
      {
        pass: (mallory) =>
          authority.pass(mallory, { username: "mallory", issuedAt: Date.now() - 10_000, lifetimeMs: 5_000 }),
        reason: "pass",
      },
      // a valid pass of another key: the message's signature does not match the key the pass names
      { pass: () => authority.pass(other, { username: "mallory" }), reason: "key" },
      // not a pass at all
      { pass: () => "x", reason: "pass" },
    ];
    const hostile: Member[] = [];
    for (const { pass } of cases) {
      const identity = generateKeyPair();
      const forged = pass(identity);
      const mallory = await member(authority, {
        identity,
        username: "mallory",
        bootstrap: b.node.multiaddrs(),
        gossipPass: () => forged,
      });
      hostile.push(mallory);
      mallory.tracker.report({ epoch: 100, samplesAccumulated: 1, samplesPerSecond: 0 });
    }
    const rejectedAll = () =>
      cases.every(({ reason }, i) =>
        b.rejected.some((r) => r.origin === at(hostile, i).node.peerId && r.reason === reason),
      );
    await eventually(rejectedAll, "b rejected every forged record for its reason", 20_000);

    // A record of a revoked peer is refused too, by a peer that applied the revocation list.
    const eve = await member(authority, { username: "eve", bootstrap: b.node.multiaddrs() });
    hostile.push(eve);
    b.node.passes.setRevoked({ usernames: ["eve"], grants: [] });
    eve.tracker.report({ epoch: 200, samplesAccumulated: 1, samplesPerSecond: 0 });
    await eventually(
      () => b.rejected.some((r) => r.origin === eve.node.peerId && r.reason === "pass"),
      "b rejected the revoked peer's record",
      20_000,
    );

    // b's own newer record reaches a after anything b would have forwarded on the same stream.
    b.tracker.report({ epoch: 7, samplesAccumulated: 1, samplesPerSecond: 0 });
    await eventually(() => heard(a, b, 7), "a hears b");
    for (const mallory of hostile) {
      expect(heard(a, mallory)).toBe(false);
      expect(heard(b, mallory)).toBe(false);
    }
    expect(a.rejected).toEqual([]);
  });

  it("rejects and does not forward records that do not fit their pass's role; takes an aux's own", async () => {
    const authority = new TestAuthority();
    const a = await member(authority);
    const b = await member(authority, { bootstrap: a.node.multiaddrs() });
    // One hostile member per case, as above. An aux pass claiming a trainer's samples in node
    // mode, or in aux mode, and a trainer pass posing as an aux.
    const cases: Array<{ role: "aux" | "trainer"; recordMode: ProgressMode; samples: number; rate: number }> =
      [
        { role: "aux", recordMode: "node", samples: 500, rate: 30 },
        { role: "aux", recordMode: "aux", samples: 0, rate: 30 },
        { role: "trainer", recordMode: "aux", samples: 0, rate: 0 },
      ];
    const hostile: Member[] = [];
    for (const { role, recordMode, samples, rate } of cases) {
      // Each greets in its pass's own mode (the hello refuses any other): only the records lie.
      const mode = role === "aux" ? "aux" : "node";
      const mallory = await member(authority, { role, mode, recordMode, bootstrap: b.node.multiaddrs() });
      hostile.push(mallory);
      mallory.tracker.report({ epoch: 100, samplesAccumulated: samples, samplesPerSecond: rate });
    }
    await eventually(
      () =>
        hostile.every((mallory) =>
          b.rejected.some((r) => r.origin === mallory.node.peerId && r.reason === "role"),
        ),
      "b rejected every record that does not fit its pass",
      20_000,
    );

    // An aux's own record: the round it helps average, no samples. It reaches a through b.
    const helper = await member(authority, {
      role: "aux",
      mode: "aux",
      recordMode: "aux",
      bootstrap: b.node.multiaddrs(),
    });
    helper.tracker.report({ epoch: 9, averagingEpoch: 9, samplesAccumulated: 0, samplesPerSecond: 0 });
    a.tracker.report({ epoch: 9, samplesAccumulated: 2, samplesPerSecond: 1 });
    b.tracker.report({ epoch: 9, samplesAccumulated: 4, samplesPerSecond: 1 });
    await eventually(() => heard(a, helper, 9) && heard(a, b, 9), "a hears the aux and b");
    expect(a.tracker.records().find((r) => r.peerId === helper.node.peerId)).toMatchObject({
      role: "aux",
      record: { mode: "aux", averagingEpoch: 9 },
    });
    for (const mallory of hostile) {
      expect(heard(a, mallory)).toBe(false);
      expect(heard(b, mallory)).toBe(false);
    }
    // Only b and a train: nothing of the hostile records counts toward the swarm's progress.
    expect(a.tracker.snapshot()).toMatchObject({ epoch: 9, alivePeers: 2, samplesPerSecond: 2 });
    expect(a.rejected).toEqual([]);
    expect(b.rejected.filter((r) => r.origin === helper.node.peerId)).toEqual([]);
  });
});
