import { afterEach, describe, expect, it } from "vitest";
import { isSwarmError } from "../src/errors.ts";
import type { Swarm } from "../src/swarm.ts";
import { at } from "./support/at.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  reportAndSync,
  seededRandom,
  startSwarm,
  weightedMean,
  type TestSwarmOptions,
} from "./support/swarm-harness.ts";

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

async function start(authority: TestAuthority, options: TestSwarmOptions = {}): Promise<Swarm> {
  const swarm = await startSwarm(authority, options);
  swarms.push(swarm);
  return swarm;
}

describe("Swarm (in-process, real libp2p on loopback)", () => {
  it("averages 10 peers (8 nodes, a client, an aux) to the sample-weighted mean, bit-identical everywhere", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const bootstrap = first.node.multiaddrs();
    const nodes = [
      first,
      ...(await Promise.all(Array.from({ length: 7 }, () => start(authority, { bootstrap })))),
    ];
    const client = await start(authority, { mode: "client", bootstrap });
    const aux = await start(authority, { mode: "aux", bootstrap });
    const everyone = [...nodes, client, aux];
    await eventually(
      () => everyone.every((swarm) => swarm.node.members().length === everyone.length - 1),
      "the swarm is fully meshed",
      45_000,
    );

    const random = seededRandom(42);
    const length = 10_000;
    const vectors = everyone.map(() => randomVector(length, random));
    const weights = everyone.map((swarm) => (swarm === aux ? 0 : 1 + Math.floor(random() * 50)));
    const inputs = vectors.map((vector) => vector.slice());
    await reportAndSync(everyone, 0, weights);
    const results = await Promise.all(
      everyone.map((swarm, k) => swarm.averager.average(0, at(vectors, k), at(weights, k))),
    );

    const expected = weightedMean(vectors.slice(0, -1), weights.slice(0, -1));
    for (const [k, result] of results.entries()) {
      expect(vectors[k]).toEqual(inputs[k]); // inputs are never modified
      if (everyone[k] === aux) continue; // aux takes no result
      expect(result.groupSize).toBe(everyone.length);
      expect(result.totalWeight).toBe(weights.reduce((sum, weight) => sum + weight, 0));
      expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-6);
      expect(result.vector).toEqual(at(results, 0).vector);
    }
    expect(aux.averager.bytesAggregated).toBeGreaterThan(0);
    expect(client.averager.bytesAggregated).toBe(0);
  }, 120_000);

  it("lets peers join and leave between rounds", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const bootstrap = first.node.multiaddrs();
    const members = [
      first,
      ...(await Promise.all(Array.from({ length: 3 }, () => start(authority, { bootstrap })))),
    ];
    const random = seededRandom(7);
    for (let epoch = 0; epoch < 3; epoch += 1) {
      if (epoch > 0) {
        const leaving = members.pop();
        if (leaving === undefined) throw new Error("no member left to stop");
        await leaving.stop();
        members.push(await start(authority, { bootstrap }), await start(authority, { bootstrap }));
      }
      await eventually(
        () => members.every((swarm) => swarm.node.members().length >= members.length - 1),
        `round ${epoch} meshed`,
        45_000,
      );
      const vectors = members.map(() => randomVector(2_000, random));
      const weights = members.map(() => 1 + Math.floor(random() * 9));
      await reportAndSync(members, epoch, weights);
      const results = await Promise.all(
        members.map((swarm, k) => swarm.averager.average(epoch, at(vectors, k), at(weights, k))),
      );
      const expected = weightedMean(vectors, weights);
      for (const result of results) {
        expect(result.groupSize).toBe(members.length);
        expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-6);
      }
    }
  }, 120_000);

  it("waits for the peers it just averaged with, even before their next epoch's record arrives", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const bootstrap = first.node.multiaddrs();
    const members = [first, await start(authority, { bootstrap }), await start(authority, { bootstrap })];
    await eventually(
      () => members.every((swarm) => swarm.node.members().length === members.length - 1),
      "meshed",
      45_000,
    );
    const weights = [3, 5, 7];
    const random = seededRandom(11);
    await reportAndSync(members, 0, weights);
    const first0 = members.map(() => randomVector(500, random));
    await Promise.all(members.map((swarm, k) => swarm.averager.average(0, at(first0, k), at(weights, k))));

    // The leader of the next round (the lowest peer id) is fast: it moves to epoch 1 and asks for
    // its group at once. The others are slow to move: every record it holds of them still says
    // epoch 0 when they arrive, 400 ms later. It must not close the group alone meanwhile.
    const sorted = [...members].sort((a, b) => (a.peerId < b.peerId ? -1 : 1));
    const leader = at(sorted, 0);
    leader.progress.report({ epoch: 1, samplesAccumulated: 50, samplesPerSecond: 10 });
    const vectors = sorted.map(() => randomVector(500, random));
    const leading = leader.averager.average(1, at(vectors, 0), at(weights, 0));
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(
      sorted
        .slice(1)
        .map(
          (swarm) => leader.progress.records().find((entry) => entry.peerId === swarm.peerId)?.record.epoch,
        ),
    ).toEqual([0, 0]);
    // Now they come, announcing the samples they bring (as the optimizer does when a round starts):
    // the leader's reducer holds each weight against its sender's records.
    const slow = sorted.slice(1);
    for (const [k, swarm] of slow.entries()) {
      swarm.progress.report({
        epoch: 1,
        samplesAccumulated: at(weights, k + 1),
        samplesPerSecond: 10,
        averagingEpoch: 1,
      });
      await swarm.progress.pushNow();
    }
    await eventually(
      () =>
        slow.every((swarm) =>
          sorted.every(
            (other) =>
              other === swarm ||
              other.progress
                .records()
                .some((entry) => entry.peerId === swarm.peerId && entry.record.epoch === 1),
          ),
        ),
      "every member heard the slow ones' announcements",
    );
    const results = await Promise.all([
      leading,
      ...slow.map((swarm, k) => swarm.averager.average(1, at(vectors, k + 1), at(weights, k + 1))),
    ]);
    const expected = weightedMean(vectors, weights);
    for (const result of results) {
      expect(result.groupSize).toBe(3);
      expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-6);
    }
  }, 90_000);

  it("neither waits for, counts nor follows a paused trainer: the others average at once, and one left alone steps alone", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const bootstrap = first.node.multiaddrs();
    const members = [first, await start(authority, { bootstrap }), await start(authority, { bootstrap })];
    await eventually(
      () => members.every((swarm) => swarm.node.members().length === members.length - 1),
      "meshed",
      45_000,
    );
    // The paused one is the lowest peer id: the leader every group would otherwise ask.
    const [paused, second, third] = [...members].sort((a, b) => (a.peerId < b.peerId ? -1 : 1)) as [
      Swarm,
      Swarm,
      Swarm,
    ];
    const weights = [3, 5, 7];
    await reportAndSync([paused, second, third], 0, weights);
    paused.progress.setPaused(["in-use"]);
    const pausedIn = (swarm: Swarm) =>
      swarm.progress
        .records()
        .some((entry) => entry.peerId === paused.peerId && entry.record.paused !== undefined);
    await eventually(() => pausedIn(second) && pausedIn(third), "the others hear of the pause");
    const view = second.progress.snapshot();
    expect(view.alivePeers).toBe(2);
    expect(view.peers.map((row) => row.peerId).sort()).toEqual([second.peerId, third.peerId].sort());

    const random = seededRandom(5);
    const vectors = [randomVector(500, random), randomVector(500, random)];
    const started = performance.now();
    const results = await Promise.all([
      second.averager.average(0, at(vectors, 0), 5),
      third.averager.average(0, at(vectors, 1), 7),
    ]);
    // Within the matchmaking deadline (4 s here): nobody waited for the paused leader.
    expect(performance.now() - started).toBeLessThan(4_000);
    for (const result of results) {
      expect(result).toMatchObject({ groupSize: 2, totalWeight: 12 });
      expect(maxAbsDifference(result.vector, weightedMean(vectors, [5, 7]))).toBeLessThan(1e-6);
    }

    // The third pauses too: the second is alone, and a lone volunteer still trains.
    third.progress.setPaused(["battery"]);
    await eventually(
      () => second.progress.records().filter((entry) => entry.record.paused !== undefined).length === 2,
      "the second hears of both pauses",
    );
    const alone = await second.averager.average(1, at(vectors, 0), 5);
    expect(alone).toMatchObject({ groupSize: 1, soleTrainer: true, totalWeight: 5 });
  }, 90_000);

  it("survives a peer killed in the middle of an all-reduce: the others finish or retry, inputs intact", async () => {
    const authority = new TestAuthority();
    const first = await start(authority);
    const bootstrap = first.node.multiaddrs();
    const members = [
      first,
      ...(await Promise.all(Array.from({ length: 7 }, () => start(authority, { bootstrap })))),
    ];
    await eventually(
      () => members.every((swarm) => swarm.node.members().length === members.length - 1),
      "meshed",
      45_000,
    );
    const random = seededRandom(99);
    const length = 400_000;
    const vectors = members.map(() => randomVector(length, random));
    const inputs = vectors.map((vector) => vector.slice());
    const weights = members.map(() => 1 + Math.floor(random() * 9));
    await reportAndSync(members, 0, weights);
    const victim = at(members, 3);
    const outcomes = members.map((swarm, k) =>
      swarm.averager.average(0, at(vectors, k), at(weights, k)).then(
        (result) => ({ ok: true as const, result }),
        (error: unknown) => ({ ok: false as const, error }),
      ),
    );
    // Kill the victim once its all-reduce traffic is flowing.
    await eventually(
      () =>
        victim.node.libp2p
          .getConnections()
          .some((connection) => connection.streams.some((stream) => stream.protocol.includes("/allreduce/"))),
      "the victim's all-reduce streams are open",
    );
    await victim.stop();
    const settled = await Promise.all(outcomes);
    const survivors = members.filter((swarm) => swarm !== victim);
    const survivorIndex = members.map((_, k) => k).filter((k) => members[k] !== victim);
    for (const k of survivorIndex) {
      expect(vectors[k]).toEqual(inputs[k]);
      const outcome = at(settled, k);
      if (!outcome.ok) expect(isSwarmError(outcome.error)).toBe(true);
    }
    // Whoever failed retries with the survivors and gets their weighted mean.
    const retry = survivorIndex.filter((k) => !at(settled, k).ok);
    // The victim reduced a part, so everyone who still needed it fails and retries.
    expect(retry.length).toBeGreaterThan(1);
    if (retry.length > 1) {
      await reportAndSync(
        survivors,
        0,
        survivorIndex.map((k) => at(weights, k)),
      );
      const again = await Promise.all(
        retry.map((k) => at(members, k).averager.average(0, at(vectors, k), at(weights, k))),
      );
      const expected = weightedMean(
        retry.map((k) => at(vectors, k)),
        retry.map((k) => at(weights, k)),
      );
      for (const result of again) expect(maxAbsDifference(result.vector, expected)).toBeLessThan(1e-5);
    }
  }, 120_000);
});
