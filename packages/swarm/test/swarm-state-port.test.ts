import { afterEach, describe, expect, it } from "vitest";
import type { Swarm } from "../src/swarm.ts";
import type { TrainingState } from "../src/state/training-state.ts";
import { eventually, TestAuthority } from "./support/swarm-fixtures.ts";
import { seededFloats } from "./support/seeded-random.ts";
import { startSwarm, type TestSwarmOptions } from "./support/swarm-harness.ts";

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

async function start(authority: TestAuthority, options: TestSwarmOptions = {}): Promise<Swarm> {
  const swarm = await startSwarm(authority, options);
  swarms.push(swarm);
  return swarm;
}

function state(epoch: number, generation: number, seed = epoch, size = 64): TrainingState {
  return {
    epoch,
    parameters: seededFloats(seed, size),
    optimizer: { name: "adam", step: epoch, slots: { m: seededFloats(seed + 1, size) } },
    generation,
    samples: epoch * 100,
  };
}

describe("Swarm's state port", () => {
  it("loads from aux peers by the state they serve and from trainers ahead, of the same generation only", async () => {
    const authority = new TestAuthority();
    const aux = await start(authority, { mode: "aux", getState: () => state(3, 0) });
    const bootstrap = aux.node.multiaddrs();
    const rolledBack = await start(authority, { bootstrap, getState: () => state(5, 1) });
    const checkpointCalls: Array<[number, number]> = [];
    const newcomer = await start(authority, {
      bootstrap,
      session: "newcomer-1",
      loadCheckpoint: (minEpoch, generation) => {
        checkpointCalls.push([minEpoch, generation]);
        return Promise.resolve(null);
      },
    });
    aux.progress.report({ epoch: 3, samplesAccumulated: 0, samplesPerSecond: 0, stateEpoch: 3 });
    rolledBack.progress.report({ epoch: 5, samplesAccumulated: 0, samplesPerSecond: 0, generation: 1 });
    newcomer.progress.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    await eventually(() => newcomer.progress.records().length === 2, "the newcomer hears from both", 30_000);
    await eventually(
      () => aux.progress.records().some((entry) => entry.record.session === "newcomer-1"),
      "the aux sees the newcomer's session",
    );

    const port = newcomer.statePort();
    expect(await port.loadNewer(0, 0)).toMatchObject({ epoch: 3, generation: 0, samples: 300 });
    expect(checkpointCalls).toEqual([]);
    expect(await port.loadNewer(0, 1)).toMatchObject({ epoch: 5, generation: 1, samples: 500 });
    // Nobody has anything newer than 3 of generation 0: the checkpoint is asked, once a while.
    expect(await port.loadNewer(3, 0)).toBeNull();
    expect(await port.loadNewer(3, 0)).toBeNull();
    expect(checkpointCalls).toEqual([[4, 0]]);
  }, 60_000);

  it("falls back to the run's checkpoint when every donor fails, and takes it only when newer and of its generation", async () => {
    const authority = new TestAuthority();
    // An aux that claims a state of epoch 9 but serves only epoch 3.
    const aux = await start(authority, { mode: "aux", getState: () => state(3, 0) });
    let checkpoint: TrainingState | null = state(7, 1);
    let failing = false;
    const checkpointCalls: Array<[number, number]> = [];
    const newcomer = await start(authority, {
      bootstrap: aux.node.multiaddrs(),
      checkpointRetryMs: 0,
      loadCheckpoint: (minEpoch, generation) => {
        checkpointCalls.push([minEpoch, generation]);
        return failing ? Promise.reject(new Error("platform down")) : Promise.resolve(checkpoint);
      },
    });
    aux.progress.report({ epoch: 9, samplesAccumulated: 0, samplesPerSecond: 0, stateEpoch: 9 });
    await eventually(
      () => newcomer.progress.records().length === 1,
      "the newcomer hears from the aux",
      30_000,
    );
    const port = newcomer.statePort();
    expect(await port.loadNewer(4, 0)).toBeNull(); // the checkpoint is of generation 1
    checkpoint = state(4, 0);
    expect(await port.loadNewer(4, 0)).toBeNull(); // not newer than 4
    checkpoint = state(7, 0);
    expect(await port.loadNewer(4, 0)).toMatchObject({ epoch: 7, generation: 0 });
    failing = true;
    expect(await port.loadNewer(4, 0)).toBeNull();
    expect(checkpointCalls).toEqual([
      [5, 0],
      [5, 0],
      [5, 0],
      [5, 0],
    ]);
  }, 60_000);

  it("serves a crowd of newcomers arriving together from every donor", async () => {
    const authority = new TestAuthority();
    // 8 MB of state: eight 1-MiB chunks, so each download takes blocks from all four donors.
    const held = state(5, 0, 21, 1_000_000);
    const first = await start(authority, { getState: () => held });
    const bootstrap = first.node.multiaddrs();
    const donors = [
      first,
      ...(await Promise.all([1, 2, 3].map(() => start(authority, { bootstrap, getState: () => held })))),
    ];
    const newcomers = await Promise.all(Array.from({ length: 16 }, () => start(authority, { bootstrap })));
    for (const donor of donors)
      donor.progress.report({ epoch: 5, samplesAccumulated: 0, samplesPerSecond: 10 });
    await Promise.all(donors.map((donor) => donor.progress.pushNow()));
    await eventually(
      () => newcomers.every((newcomer) => newcomer.stateDonors(1, 0).length === donors.length),
      "every newcomer knows the four donors",
      60_000,
    );

    const states = await Promise.all(newcomers.map((newcomer) => newcomer.statePort().loadNewer(0, 0)));
    const expected = Buffer.from(held.parameters.buffer);
    for (const got of states) {
      expect(got).toMatchObject({ epoch: 5, generation: 0, samples: 500 });
      expect(Buffer.from(present(got).parameters.buffer).equals(expected)).toBe(true);
    }
    const chunks = present(first.state.snapshot()).chunkHashes.length;
    expect(chunks).toBe(8);
    const served = donors.map((donor) => donor.state.servedChunks);
    expect(served.reduce((sum, count) => sum + count, 0)).toBe(16 * chunks);
    // Each newcomer starts one block at every donor at once.
    for (const count of served) expect(count).toBeGreaterThanOrEqual(16);
  }, 120_000);
});

function present<T>(value: T | null | undefined): T {
  if (value === null || value === undefined) throw new Error("expected a value");
  return value;
}
