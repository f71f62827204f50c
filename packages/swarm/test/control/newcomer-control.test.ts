import { signRunControl } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { afterEach, describe, expect, it } from "vitest";
import type { Swarm } from "../../src/swarm.ts";
import { eventually, TestAuthority } from "../support/swarm-fixtures.ts";
import { startSwarm } from "../support/swarm-harness.ts";

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop()));
});

describe("a newcomer hears the run control from the swarm (real libp2p on loopback)", () => {
  it("gets the control a member holds as soon as they greet, with no platform involved", async () => {
    const authority = new TestAuthority();
    const aux = await startSwarm(authority, { mode: "aux" });
    swarms.push(aux);
    const paused = signRunControl(nodeCrypto, authority.keyPair, {
      experimentId: authority.experimentId,
      version: 4,
      issuedAt: Date.now(),
      status: "paused",
      generation: 0,
      rollback: null,
      revokedUsernames: [],
      revokedGrants: [],
    });
    expect(aux.control.offer(paused, "platform").adopted).toBe(true);

    // Nobody pushes anything after this: the newcomer must hear it when it connects.
    const newcomer = await startSwarm(authority, { bootstrap: aux.node.multiaddrs() });
    swarms.push(newcomer);
    await eventually(() => newcomer.control.current() !== null, "the newcomer holds a run control", 15_000);
    expect(newcomer.control.current()).toMatchObject({ version: 4, status: "paused" });
  }, 30_000);
});
