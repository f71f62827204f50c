import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * A node that restarts with its identity (an aux restarted by its organizer, a volunteer's machine
 * after a reboot) is another process under the same PeerId: it knows nothing of the members, and
 * they must say hello to it again rather than take it for the node they knew.
 */

const nodes: SwarmNode[] = [];
afterEach(async () => {
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

async function start(...args: Parameters<typeof startNode>): Promise<SwarmNode> {
  const node = await startNode(...args);
  nodes.push(node);
  return node;
}

describe("a node restarted with its identity", () => {
  it("is greeted again by the members that knew it, and keeps them past the hello deadline", async () => {
    const authority = new TestAuthority();
    const identity = generateKeyPair();
    const aux = await start(authority, {
      identity,
      mode: "aux",
      username: "organizer",
      helloTimeoutMs: 3_000,
    });
    const address = at(aux.multiaddrs(), 0);
    const port = /\/tcp\/(\d+)\//.exec(address)?.[1];
    if (port === undefined) throw new Error(`no TCP port in ${address}`);
    const trainers = [
      await start(authority, { username: "vera", bootstrap: [address] }),
      await start(authority, { username: "walt", bootstrap: [address] }),
    ];
    await eventually(() => aux.members().length === 2, "the aux knows both trainers", 20_000);

    // The aux's process ends (SIGKILL, a reboot) and a new one starts with its identity and address.
    nodes.splice(nodes.indexOf(aux), 1);
    await aux.stop();
    const restarted = await start(authority, {
      identity,
      mode: "aux",
      username: "organizer",
      listen: [`/ip4/127.0.0.1/tcp/${port}`],
      helloTimeoutMs: 3_000,
    });
    expect(restarted.peerId).toBe(aux.peerId);
    await eventually(
      () => trainers.every((trainer) => restarted.members().includes(trainer.peerId)),
      "the restarted aux admits both trainers",
      30_000,
    );
    // Past its hello deadline it still has them: each showed its pass to the new process.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    for (const trainer of trainers) {
      expect(restarted.members()).toContain(trainer.peerId);
      expect(restarted.authorizer.isDenied(trainer.peerId)).toBe(false);
      expect(trainer.members()).toContain(restarted.peerId);
    }
  }, 60_000);
});
