import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { RunControlBoard } from "../../src/control/run-control-board.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { defineMethod } from "../../src/rpc/rpc.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority, silentLogger } from "../support/swarm-fixtures.ts";

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
    authorityPublicKey: authority.keyPair.publicKey,
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

    // A revoked key is refused at its hello, though it was never seen before.
    const identity = generateKeyPair();
    aliceBoard.offer(
      authority.runControl({
        version: 3,
        revokedUsernames: ["mallory"],
        revokedPublicKeys: [identity.publicKey],
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
});
