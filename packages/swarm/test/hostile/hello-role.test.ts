import { afterEach, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * A volunteer with a valid pass greets in a mode its pass's role does not allow: a trainer as an
 * aux (the swarm's reducers and monitors), or an aux pass as a trainer. Either side of the hello
 * refuses it, gates the peer and never records the claimed mode.
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

describe("a hello in a mode the pass does not allow (real libp2p on loopback)", () => {
  it("a trainer pass greeting as an aux is refused and gated by the node it dials", async () => {
    const authority = new TestAuthority();
    const honest = await start(authority, { username: "vera" });
    const hostile = await start(authority, { username: "mallory", role: "trainer", mode: "aux" });
    await expect(hostile.connect(at(honest.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    await eventually(() => honest.authorizer.isDenied(hostile.peerId), "the honest node gated mallory");
    expect(honest.authorizer.denialOf(hostile.peerId)).toMatch(/aux mode from a trainer pass/);
    expect(honest.modeOf(hostile.peerId)).toBeUndefined();
    expect(honest.members()).not.toContain(hostile.peerId);
  }, 30_000);

  it("an aux pass greeting as a trainer is refused", async () => {
    const authority = new TestAuthority();
    const honest = await start(authority, { username: "vera" });
    const hostile = await start(authority, { username: "organizer", role: "aux", mode: "node" });
    await expect(hostile.connect(at(honest.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    await eventually(() => honest.authorizer.isDenied(hostile.peerId), "the honest node gated it");
    expect(honest.authorizer.denialOf(hostile.peerId)).toMatch(/aux takes part in aux mode only/);
    expect(honest.modeOf(hostile.peerId)).toBeUndefined();
  }, 30_000);

  it("a trainer pass answering a hello as an aux is refused by the node that dialed it", async () => {
    const authority = new TestAuthority();
    const hostile = await start(authority, { username: "mallory", role: "trainer", mode: "aux" });
    const honest = await start(authority, { username: "vera" });
    await expect(honest.connect(at(hostile.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    expect(honest.authorizer.denialOf(hostile.peerId)).toMatch(/aux mode from a trainer pass/);
    expect(honest.modeOf(hostile.peerId)).toBeUndefined();
    expect(honest.members()).not.toContain(hostile.peerId);
  }, 30_000);

  it("an honest aux and trainer still greet each other", async () => {
    const authority = new TestAuthority();
    const aux = await start(authority, { username: "organizer", mode: "aux" });
    const trainer = await start(authority, { username: "vera" });
    await trainer.connect(at(aux.multiaddrs(), 0));
    await eventually(() => aux.modeOf(trainer.peerId) === "node", "the aux knows the trainer's mode");
    expect(trainer.modeOf(aux.peerId)).toBe("aux");
  }, 30_000);
});
