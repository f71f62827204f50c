import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { Swarm } from "../../src/swarm.ts";
import { at } from "../support/at.ts";
import { eventually, TestAuthority } from "../support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  seededRandom,
  startSwarm,
  weightedMean,
  type TestSwarmOptions,
} from "../support/swarm-harness.ts";

/**
 * Reachability on loopback, with real libp2p. A node that listens on 127.0.0.2 (or .3) but dials
 * out from 127.0.0.1 is in the position of a volunteer behind NAT: the aux sees its requests come
 * from an address where nothing listens, so the aux's dial-back fails, just as it fails at a home
 * router's public address. Such a node must find that out by itself, hold a relay slot on the aux,
 * announce only that address, and still average with the others. (The netns test with real NAT
 * routers is in test/nat-netns.test.ts.)
 */

interface LogLine {
  readonly msg: string;
  readonly [key: string]: unknown;
}

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

async function start(authority: TestAuthority, options: TestSwarmOptions = {}, lines?: LogLine[]) {
  const logger =
    lines === undefined
      ? undefined
      : pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line) as LogLine) });
  const swarm = await startSwarm(authority, { ...options, ...(logger === undefined ? {} : { logger }) });
  swarms.push(swarm);
  return swarm;
}

describe("reachability (real libp2p on loopback)", () => {
  it("a node the aux can dial back is a full node, and announces the address it was reached at", async () => {
    const authority = new TestAuthority();
    const aux = await start(authority, { mode: "aux" });
    const lines: LogLine[] = [];
    // Asked to hold no relay slot (as if browsers could dial it), it holds none.
    const node = await start(authority, { bootstrap: aux.node.multiaddrs(), listenViaRelays: false }, lines);

    expect(node.node.reachability).toBe("direct");
    expect(node.node.mode).toBe("node");
    expect(node.node.connectivity()).toMatchObject({ mode: "node", direct: 1, relayed: 0, upgraded: 0 });
    const reached = lines.find((line) => line.msg.startsWith("reachable at /ip4/127.0.0.1/tcp/"));
    expect(reached?.address).toMatch(new RegExp(`/p2p/${node.peerId}$`));
    expect(node.node.multiaddrs().some((address) => address.includes("/p2p-circuit"))).toBe(false);
  }, 30_000);

  it("a full node on TCP and plain WebSockets also holds a relay slot on the aux, for browser tabs to reach it through", async () => {
    const authority = new TestAuthority();
    const aux = await start(authority, { mode: "aux" });
    const lines: LogLine[] = [];
    // A page of a platform served over HTTPS dials neither of these.
    const listen = ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/tcp/0/ws"];
    const node = await start(authority, { bootstrap: aux.node.multiaddrs(), listen }, lines);

    expect(node.node.reachability).toBe("direct");
    expect(node.node.mode).toBe("node");
    await eventually(
      () => node.node.multiaddrs().some((address) => address.includes(`/p2p/${aux.peerId}/p2p-circuit`)),
      "a relayed address through the aux",
    );
    expect(lines.some((line) => line.msg.startsWith("holding a relay slot on aux peer"))).toBe(true);
  }, 30_000);

  it("nodes the aux cannot dial back run through its relay, meet each other there, and average with the aux reducing", async () => {
    const authority = new TestAuthority();
    const aux = await start(authority, { mode: "aux" });
    const bootstrap = aux.node.multiaddrs();
    const logs: LogLine[][] = [[], []];
    const homes = [
      await start(authority, { bootstrap, listen: ["/ip4/127.0.0.2/tcp/0"] }, logs[0]),
      await start(authority, { bootstrap, listen: ["/ip4/127.0.0.3/tcp/0"] }, logs[1]),
    ];
    const [first, second] = homes as [Swarm, Swarm];

    for (const [k, home] of homes.entries()) {
      expect(home.node.reachability).toBe("relayed");
      expect(home.node.mode).toBe("client");
      const warning = at(logs, k).find((line) => line.msg.startsWith("not reachable from outside"));
      expect(warning?.reason).toMatch(/127\.0\.0\.1\/tcp\/\d+/);
      await eventually(
        () => at(logs, k).some((line) => line.msg.startsWith("holding a relay slot on aux peer")),
        "a relay slot",
      );
    }
    // They learn each other's relayed address (from the aux) and connect through the relay.
    await eventually(
      () => first.node.members().includes(second.peerId) && second.node.members().includes(first.peerId),
      "the two homes are connected",
      30_000,
    );
    expect(first.node.pathTo(second.peerId)).toBe("relayed");
    expect(first.node.pathTo(aux.peerId)).toBe("direct");
    expect(first.node.connectivity()).toEqual({
      mode: "client",
      reachability: "relayed",
      direct: 1,
      relayed: 1,
      upgraded: 0,
    });
    expect(second.node.modeOf(first.peerId)).toBe("client");
    expect(aux.node.modeOf(first.peerId)).toBe("client");
    await eventually(
      () => logs.every((lines) => lines.some((line) => line.path === "relayed")),
      "each home logs the relayed path to the other",
    );

    // A round: the homes send and receive, the aux reduces every part.
    const everyone = [first, second, aux];
    const weights = [3, 5, 0];
    const random = seededRandom(9);
    const vectors = everyone.map(() => randomVector(5_000, random));
    everyone.forEach((swarm, k) => {
      const helping = swarm === aux ? { averagingEpoch: 1 } : {};
      swarm.progress.report({
        epoch: 1,
        samplesAccumulated: at(weights, k),
        samplesPerSecond: swarm === aux ? 0 : 10,
        ...helping,
      });
    });
    await Promise.all(everyone.map((swarm) => swarm.progress.pushNow()));
    await eventually(
      () =>
        everyone.every(
          (swarm) => swarm.progress.records().filter((entry) => entry.record.epoch === 1).length === 2,
        ),
      "everyone sees the others at epoch 1",
    );
    const results = await Promise.all(
      everyone.map((swarm, k) => swarm.averager.average(1, at(vectors, k), at(weights, k))),
    );
    const expected = weightedMean(vectors.slice(0, 2), weights.slice(0, 2));
    for (const result of results.slice(0, 2)) {
      expect(result.groupSize).toBe(3);
      expect(result.totalWeight).toBe(8);
      expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-6);
    }
    expect(first.averager.bytesAggregated).toBe(0);
    expect(second.averager.bytesAggregated).toBe(0);
    expect(aux.averager.bytesAggregated).toBeGreaterThan(0);
  }, 60_000);
});
