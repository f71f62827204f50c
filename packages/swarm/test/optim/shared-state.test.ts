import { parseExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import {
  CollaborativeOptimizer,
  type CollaborativeOptimizerEvent,
} from "../../src/optim/collaborative-optimizer.ts";
import { createFlatOptimizer } from "../../src/optim/create-flat-optimizer.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";
import type { EpochState, ProgressPort, StatePort } from "../../src/optim/ports.ts";
import { stateDigest } from "../../src/state/state-digest.ts";

/**
 * One run, one model, healed by the peers themselves: a peer whose state at its step differs from
 * the one most other trainers publish for that step takes theirs over before its next round.
 */

const layout = ParameterLayout.fromShapes([{ name: "w", shape: [8] }]);
const config = parseExperimentConfig({ training: { targetBatchSize: 16 } });

function parameters(value: number): Float32Array {
  return new Float32Array(layout.size).fill(value);
}

/** The swarm's state at `epoch` with parameters all `value`. */
function swarmState(epoch: number, value: number): EpochState {
  return {
    epoch,
    parameters: parameters(value),
    optimizer: createFlatOptimizer(config.optimizer, layout).exportState(),
  };
}

function peer(
  others: () => Map<string, string[]>,
  shared: (epoch: number, digest: string) => EpochState | null,
) {
  const calls: Array<[number, string]> = [];
  const progress: ProgressPort = {
    report: () => undefined,
    global: () => ({ epoch: 0, samplesAccumulated: 0, targetBatchSize: 16, etaSeconds: Infinity }),
    at: () => ({
      epoch: 0,
      samplesAccumulated: 0,
      targetBatchSize: 16,
      etaSeconds: Infinity,
      peersAtEpoch: 1,
    }),
    sharedStates: () => others(),
  };
  const state: StatePort = {
    loadNewer: () => Promise.resolve(null),
    loadShared: (epoch, digest) => {
      calls.push([epoch, digest]);
      return Promise.resolve(shared(epoch, digest));
    },
  };
  const optimizer = new CollaborativeOptimizer({
    config,
    layout,
    parameters: parameters(0),
    progress,
    averager: { average: () => Promise.reject(new Error("no round in these tests")) },
    state,
  });
  const events: CollaborativeOptimizerEvent[] = [];
  optimizer.on((event) => events.push(event));
  return { optimizer, calls, events };
}

const mine = stateDigest(parameters(0));
const theirs = stateDigest(parameters(1));

describe("taking the swarm's state over", () => {
  it("takes over the state most other trainers hold for its own step, once", async () => {
    const loaded = swarmState(0, 1);
    const { optimizer, calls, events } = peer(
      () => new Map([[theirs, ["p1", "p2"]]]),
      () => loaded,
    );
    expect(optimizer.stateHash).toEqual({ epoch: 0, digest: mine });
    expect(await optimizer.maybeStep()).toBe(false);
    expect(calls).toEqual([[0, theirs]]);
    expect(optimizer.stateHash).toEqual({ epoch: 0, digest: theirs });
    expect(Array.from(optimizer.parameters)).toEqual(Array.from(parameters(1)));
    expect(events).toContainEqual({
      type: "state-loaded",
      epoch: 0,
      previousEpoch: 0,
      reason: "swarm-state",
    });
    // Now one of them: nothing more to take over.
    await optimizer.maybeStep();
    expect(calls).toHaveLength(1);
  });

  it("keeps its state when as many or more trainers hold it, and settles a tie by the smaller digest", async () => {
    const smaller = "0".repeat(16);
    const larger = "f".repeat(16);
    // One other holds another version: a tie of one against one.
    const tie = (other: string) =>
      peer(
        () => new Map([[other, ["p1"]]]),
        () => swarmState(0, 1),
      );
    const lose = tie(smaller);
    await lose.optimizer.maybeStep();
    expect(lose.calls).toEqual(mine < smaller ? [] : [[0, smaller]]);
    const win = tie(larger);
    await win.optimizer.maybeStep();
    expect(win.calls).toEqual(mine < larger ? [] : [[0, larger]]);
    // More of the others hold its own version than another: it keeps its own.
    const majority = peer(
      () =>
        new Map([
          [mine, ["p1", "p2"]],
          [theirs, ["p3", "p4"]],
        ]),
      () => swarmState(0, 1),
    );
    await majority.optimizer.maybeStep();
    expect(majority.calls).toEqual([]);
  });

  it("tries a state once: when nobody can give it, it does not ask again for the same one", async () => {
    const { optimizer, calls } = peer(
      () => new Map([[theirs, ["p1", "p2"]]]),
      () => null,
    );
    await optimizer.maybeStep();
    await optimizer.maybeStep();
    expect(calls).toEqual([[0, theirs]]);
    expect(optimizer.stateHash.digest).toBe(mine);
  });

  it("takes nothing when no other trainer publishes a state for its step", async () => {
    const { optimizer, calls } = peer(
      () => new Map(),
      () => swarmState(3, 1),
    );
    await optimizer.maybeStep();
    expect(calls).toEqual([]);
  });
});
