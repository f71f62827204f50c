import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

const nodes: SwarmNode[] = [];
afterEach(async () => {
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

describe("a member that cannot be reached (real libp2p on loopback)", () => {
  it("is dialed with a growing pause between tries, and the failure is logged with its addresses", async () => {
    const authority = new TestAuthority();
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { level: "warn" },
      {
        write: (line: string) => {
          lines.push(JSON.parse(line) as Record<string, unknown>);
        },
      },
    );
    const alice = await startNode(authority, { username: "alice", logger });
    nodes.push(alice);
    const bob = await startNode(authority, { username: "bob", bootstrap: alice.multiaddrs() });
    await eventually(() => alice.members().includes(bob.peerId), "alice knows bob", 15_000);
    const bobAddresses = bob.multiaddrs();

    // Bob's machine vanishes; alice still knows his addresses and keeps trying to reach him.
    const dials: number[] = [];
    const dial = alice.libp2p.dial.bind(alice.libp2p);
    alice.libp2p.dial = (...args: Parameters<typeof dial>) => {
      if (String(args[0]) === bob.peerId) dials.push(Date.now());
      return dial(...args);
    };
    await bob.stop();
    const since = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 14_000));

    // Every 2 s would be 7 tries; with pauses of 5 s and 10 s after the failures, at most 3.
    expect(dials.length).toBeGreaterThanOrEqual(1);
    expect(dials.length).toBeLessThanOrEqual(3);
    const warned = lines.find((line) => String(line.msg).startsWith(`could not reach member ${bob.peerId}`));
    expect(warned).toMatchObject({ peer: bob.peerId, failures: 1, retryInSeconds: 5 });
    expect(warned?.addresses).toEqual(
      expect.arrayContaining([expect.stringContaining(bobAddresses[0]?.split("/p2p/")[0] ?? "")]),
    );
    expect(Date.now() - since).toBeGreaterThanOrEqual(14_000);
  }, 40_000);
});
