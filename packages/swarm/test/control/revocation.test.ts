import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { RunControlBoard } from "../../src/control/run-control-board.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { defineMethod } from "../../src/rpc/rpc.ts";
import { at } from "../support/at.ts";
import {
  eventually,
  startNode,
  TestAuthority,
  silentLogger,
  testGrantOf,
} from "../support/swarm-fixtures.ts";

const echo = defineMethod({
  name: "echo",
  request: z.strictObject({ text: z.string().max(100) }),
  response: z.strictObject({ text: z.string() }),
  maxFrameBytes: 0,
});

const nodes: SwarmNode[] = [];
const boards: RunControlBoard[] = [];
afterEach(async () => {
  for (const board of boards.splice(0)) board.stop();
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

async function start(...args: Parameters<typeof startNode>): Promise<SwarmNode> {
  const node = await startNode(...args);
  nodes.push(node);
  return node;
}

/** A run control board on `node`, the way `Swarm` wires it. */
function boardOn(node: SwarmNode, authority: TestAuthority): RunControlBoard {
  const board = new RunControlBoard({
    rpc: node.rpc,
    experimentId: authority.experimentId,
    authority: node.authority,
    peers: () => node.members(),
    applyRevocations: (revoked) => {
      node.applyRevocations(revoked);
    },
    logger: silentLogger,
  });
  board.start();
  boards.push(board);
  return board;
}

describe("revocation through the run control (real libp2p on loopback)", () => {
  it("disconnects a banned peer everywhere the control reaches, and refuses it and revoked keys after", async () => {
    const authority = new TestAuthority();
    const alice = await start(authority, { username: "alice" });
    const bootstrap = alice.multiaddrs();
    const mallory = await start(authority, { username: "mallory", bootstrap });
    const carol = await start(authority, { username: "carol", bootstrap });
    const everyone = [alice, mallory, carol];
    await eventually(() => everyone.every((node) => node.members().length === 2), "meshed", 30_000);
    const aliceBoard = boardOn(alice, authority);
    boardOn(mallory, authority);
    const carolBoard = boardOn(carol, authority);
    alice.rpc.handle(echo, async (incoming) => {
      await incoming.respond({ text: incoming.head.text });
    });

    // The platform's control reaches alice; she passes it on to carol.
    aliceBoard.offer(authority.runControl({ version: 2, revokedUsernames: ["mallory"] }), "platform");
    for (const node of [alice, carol]) {
      await eventually(
        () =>
          node.authorizer.isDenied(mallory.peerId) &&
          !node.members().includes(mallory.peerId) &&
          node.libp2p
            .getConnections()
            .every((connection) => connection.remotePeer.toString() !== mallory.peerId),
        `${node === alice ? "alice" : "carol"} dropped mallory`,
      );
    }
    expect(carolBoard.current()?.version).toBe(2);
    expect(alice.members()).toEqual([carol.peerId]);
    // Mallory cannot come back: her dial is gated, and any request she gets through is refused.
    await mallory.connect(at(alice.multiaddrs(), 0)).catch(() => undefined);
    await expect(mallory.rpc.request(alice.peerId, echo, { text: "hi" })).rejects.toThrow();
    expect(alice.members()).toEqual([carol.peerId]);

    // A pass of a revoked grant is refused at its hello, though it was never seen before.
    const identity = generateKeyPair();
    aliceBoard.offer(
      authority.runControl({
        version: 3,
        revokedUsernames: ["mallory"],
        revokedGrants: [testGrantOf(identity.publicKey)],
      }),
      "platform",
    );
    await eventually(() => carolBoard.current()?.version === 3, "carol holds version 3");
    const dave = await start(authority, { identity, username: "dave" });
    for (const node of [alice, carol]) {
      await expect(dave.connect(at(node.multiaddrs(), 0))).rejects.toMatchObject({
        code: "UNAUTHORIZED_PEER",
        message: expect.stringMatching(/revoked/) as unknown,
      });
    }
    expect(alice.members()).not.toContain(dave.peerId);
    expect(carol.members()).not.toContain(dave.peerId);
    expect(alice.members()).toEqual([carol.peerId]);
  }, 60_000);

  it("a node whose token was revoked comes back with a new token and the same identity, and is accepted at once", async () => {
    const authority = new TestAuthority();
    const alice = await start(authority, { username: "alice" });
    const bootstrap = alice.multiaddrs();
    const carol = await start(authority, { username: "carol", bootstrap });
    const identity = generateKeyPair();
    const oldGrant = "token-old";
    const oldPass = authority.pass(identity, { username: "vera", grant: oldGrant });
    const vera = await start(authority, {
      identity,
      username: "vera",
      bootstrap,
      pass: oldPass,
      refreshPass: () => Promise.resolve(oldPass),
    });
    const everyone = [alice, carol, vera];
    await eventually(() => everyone.every((node) => node.members().length === 2), "meshed", 30_000);
    const aliceBoard = boardOn(alice, authority);
    boardOn(carol, authority);
    boardOn(vera, authority);

    // Vera revokes the token on the page; the control reaches alice, who tells carol.
    aliceBoard.offer(authority.runControl({ version: 2, revokedGrants: [oldGrant] }), "platform");
    for (const node of [alice, carol]) {
      await eventually(() => !node.members().includes(vera.peerId), "vera dropped");
      expect(node.refusedPeers.of(vera.peerId)).toMatchObject({ code: "PASS_REVOKED" });
    }
    nodes.splice(nodes.indexOf(vera), 1);
    await vera.stop();

    // She restarts the same machine (same identity) with a pass of her new token: every node
    // accepts it while the old token stays revoked.
    const started = Date.now();
    const back = await start(authority, {
      identity,
      username: "vera",
      bootstrap,
      refreshPass: () => Promise.resolve(authority.pass(identity, { username: "vera", grant: "token-new" })),
      pass: authority.pass(identity, { username: "vera", grant: "token-new" }),
    });
    expect(back.peerId).toBe(vera.peerId);
    await eventually(
      () => alice.members().includes(back.peerId) && carol.members().includes(back.peerId),
      "alice and carol accept vera's new pass",
      20_000,
    );
    expect(Date.now() - started).toBeLessThan(20_000);
    for (const node of [alice, carol]) {
      expect(node.passes.revocationOf({ username: "vera", grant: oldGrant })).toMatch(/revoked/);
      expect(node.refusedPeers.of(back.peerId)).toBeUndefined();
    }
    // Her old pass stays refused, whoever shows it.
    expect(() => alice.passes.verify(oldPass, { now: Date.now() })).toThrow(
      expect.objectContaining({ code: "PASS_REVOKED" }),
    );
  }, 60_000);

  it("a peer that refused this node's pass is remembered as refusing it, with the reason, and not gated", async () => {
    const authority = new TestAuthority();
    const alice = await start(authority, { username: "alice" });
    boardOn(alice, authority).offer(
      authority.runControl({ version: 2, revokedUsernames: ["mallory"] }),
      "platform",
    );
    const mallory = await start(authority, { username: "mallory" });
    await expect(mallory.connect(at(alice.multiaddrs(), 0))).rejects.toMatchObject({
      message: expect.stringMatching(/banned or removed/) as unknown,
    });
    expect(mallory.refusedBy.of(alice.peerId)).toMatchObject({
      code: "PASS_REVOKED",
      reason: expect.stringMatching(/mallory was banned or removed/) as unknown,
    });
    // The fault is mallory's pass, not alice: mallory does not gate alice.
    expect(mallory.authorizer.isDenied(alice.peerId)).toBe(false);
    expect(alice.refusedPeers.recent().map((refusal) => refusal.peer)).toEqual([mallory.peerId]);
  }, 30_000);
});
