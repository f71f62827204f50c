import { parseExperimentConfig, type ExperimentConfigInput } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { CollaborativeOptimizer } from "../../src/optim/collaborative-optimizer.ts";
import { ParameterLayout } from "../../src/optim/parameter-layout.ts";
import { SgdOptimizer } from "../../src/optim/sgd.ts";
import { FakeState, FakeSwarm } from "../support/fake-swarm.ts";
import { seededRandom } from "../support/seeded-random.ts";

const layout = ParameterLayout.fromShapes([
  { name: "kernel", shape: [5, 4] },
  { name: "bias", shape: [4] },
]);

function config(overrides: ExperimentConfigInput = {}) {
  return parseExperimentConfig(overrides);
}

function vector(seed: number, scale = 1): Float32Array {
  const next = seededRandom(seed);
  return Float32Array.from({ length: layout.size }, () => (next() * 2 - 1) * scale);
}

const start = vector(1);

/** Each peer's data: the gradient of ½‖θ − target‖² at the parameters its model trains with. */
function bowlGradient(optimizer: CollaborativeOptimizer, target: Float32Array): Float32Array {
  const at = optimizer.workingParameters;
  return Float32Array.from(at, (value, i) => value - (target[i] ?? 0));
}

function peer(swarm: FakeSwarm, index: number, cfg: ReturnType<typeof config>, state = new FakeState()) {
  return new CollaborativeOptimizer({
    config: cfg,
    layout,
    parameters: start,
    progress: swarm.progress(index),
    averager: swarm.averager(index),
    state,
  });
}

function bits(values: Float32Array): string {
  return Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString("hex");
}

/**
 * Runs `rounds` collaborative steps: in each, peer i takes `minibatches[i]` minibatches of
 * `batch` samples on its own bowl, then every peer asks to step.
 */
async function train(
  peers: readonly CollaborativeOptimizer[],
  targets: readonly Float32Array[],
  minibatches: readonly number[],
  batch: number,
  onStep?: (round: number) => void,
): Promise<void> {
  for (const optimizer of peers) await optimizer.maybeStep(); // joins: nobody to load from
  const rounds = 6;
  for (let round = 0; round < rounds; round++) {
    peers.forEach((optimizer, i) => {
      for (let k = 0; k < (minibatches[i] ?? 0); k++) {
        optimizer.accumulate(bowlGradient(optimizer, targets[i] ?? start), batch);
      }
    });
    const stepped = await Promise.all(peers.map((optimizer) => optimizer.maybeStep()));
    expect(stepped.every(Boolean)).toBe(true);
    onStep?.(round);
  }
}

describe("the diloco strategy", () => {
  it("with one inner step per round and an outer SGD of rate 1 without momentum, reproduces dedloc", async () => {
    const targets = [vector(11)];
    const run = async (strategy: "dedloc" | "diloco") => {
      const cfg = config({
        training: { targetBatchSize: 8 },
        optimizer: { name: "adam", learningRate: 0.05 },
        averaging: {
          strategy,
          outerOptimizer: { learningRate: 1, momentum: 0, nesterov: false },
        },
      });
      const swarm = new FakeSwarm(1, 8);
      const optimizer = peer(swarm, 0, cfg);
      const trajectory: Float32Array[] = [];
      await train([optimizer], targets, [1], 8, () => trajectory.push(optimizer.parameters.slice()));
      return trajectory;
    };
    const dedloc = await run("dedloc");
    const diloco = await run("diloco");
    expect(diloco).toHaveLength(6);
    for (const [step, parameters] of diloco.entries()) {
      const reference = dedloc[step] ?? new Float32Array();
      parameters.forEach((value, i) => {
        expect(Math.abs(value - (reference[i] ?? 0))).toBeLessThan(1e-6);
      });
    }
    // And the run moved: this is not two copies of the starting point.
    expect(Math.abs((diloco[5]?.[0] ?? 0) - (start[0] ?? 0))).toBeGreaterThan(0.05);
  });

  it("with several peers and equal data also reproduces dedloc's step", async () => {
    const target = vector(12);
    const run = async (strategy: "dedloc" | "diloco") => {
      const cfg = config({
        training: { targetBatchSize: 24 },
        optimizer: { name: "lamb", learningRate: 0.01 },
        averaging: { strategy, outerOptimizer: { learningRate: 1, momentum: 0 } },
      });
      const swarm = new FakeSwarm(3, 24);
      const peers = [0, 1, 2].map((i) => peer(swarm, i, cfg));
      await train(peers, [target, target, target], [1, 1, 1], 8);
      return peers[0]?.parameters ?? new Float32Array();
    };
    const dedloc = await run("dedloc");
    const diloco = await run("diloco");
    diloco.forEach((value, i) => {
      expect(Math.abs(value - (dedloc[i] ?? 0))).toBeLessThan(1e-6);
    });
  });

  it("keeps every peer's θ bit-identical after every outer step, whatever each peer's inner steps", async () => {
    const cfg = config({ training: { targetBatchSize: 44 }, averaging: { strategy: "diloco" } });
    const swarm = new FakeSwarm(4, 44);
    const peers = [0, 1, 2, 3].map((i) => peer(swarm, i, cfg));
    const targets = [vector(21), vector(22), vector(23), vector(24)];
    let checked = 0;
    await train(peers, targets, [1, 2, 3, 5], 4, () => {
      const reference = bits(peers[0]?.parameters ?? new Float32Array());
      for (const optimizer of peers) {
        expect(bits(optimizer.parameters)).toBe(reference);
        // After a step without overlap, every peer starts its next inner steps from θ.
        expect(bits(optimizer.workingParameters)).toBe(reference);
      }
      checked++;
    });
    expect(checked).toBe(6);
  });

  it("averages the pseudo-gradients weighted by samples and applies the outer Nesterov step", async () => {
    const cfg = config({
      training: { targetBatchSize: 16 },
      optimizer: { name: "adam", learningRate: 0.1 },
      averaging: { strategy: "diloco" },
    });
    const swarm = new FakeSwarm(2, 16);
    const peers = [peer(swarm, 0, cfg), peer(swarm, 1, cfg)];
    for (const optimizer of peers) await optimizer.maybeStep();
    const targets = [vector(31), vector(32)];
    // Peer 0 takes 1 inner step of 4 samples, peer 1 three of 4: weights 4 and 12.
    [1, 3].forEach((count, i) => {
      const optimizer = peers[i];
      if (optimizer === undefined) return;
      for (let k = 0; k < count; k++) optimizer.accumulate(bowlGradient(optimizer, targets[i] ?? start), 4);
    });
    const deltas = peers.map((optimizer) =>
      Float32Array.from(optimizer.parameters, (value, i) => value - (optimizer.workingParameters[i] ?? 0)),
    );
    await Promise.all(peers.map((optimizer) => optimizer.maybeStep()));
    const averaged = Float32Array.from(
      deltas[0] ?? [],
      (value, i) => (value * 4 + (deltas[1]?.[i] ?? 0) * 12) / 16,
    );
    const expected = start.slice();
    new SgdOptimizer({ momentum: 0.9, nesterov: true }, layout).step(expected, averaged, 0.7);
    expect(bits(peers[0]?.parameters ?? new Float32Array())).toBe(bits(expected));
    expect(peers[0]?.exportState().optimizer).toMatchObject({ name: "sgd", step: 1 });
  });

  it("hands a late joiner θ and the outer state, and it trains on in step with the others", async () => {
    const cfg = config({ training: { targetBatchSize: 16 }, averaging: { strategy: "diloco" } });
    const swarm = new FakeSwarm(2, 16);
    const peers = [peer(swarm, 0, cfg), peer(swarm, 1, cfg)];
    const targets = [vector(41), vector(42), vector(43)];
    await train(peers, targets, [2, 2], 4);
    const donor = new FakeState();
    donor.donor = peers[0]?.exportState() ?? null;
    expect(donor.donor?.optimizer.name).toBe("sgd");
    const joinerSwarm = new FakeSwarm(3, 24);
    const all = [peer(joinerSwarm, 0, cfg), peer(joinerSwarm, 1, cfg), peer(joinerSwarm, 2, cfg, donor)];
    const [first, second, joiner] = all;
    if (first === undefined || second === undefined || joiner === undefined) throw new Error("no peers");
    const state = peers[0]?.exportState();
    if (state === undefined) throw new Error("no state");
    first.importState(state);
    second.importState(state);
    expect(await joiner.maybeStep()).toBe(false); // it loads the donor's state first
    expect(joiner.epoch).toBe(6);
    expect(bits(joiner.parameters)).toBe(bits(state.parameters));
    expect(bits(joiner.workingParameters)).toBe(bits(state.parameters));
    expect(bits(joiner.exportState().optimizer.slots.momentum ?? new Float32Array())).toBe(
      bits(state.optimizer.slots.momentum ?? new Float32Array()),
    );
    for (const [i, optimizer] of all.entries()) {
      for (let k = 0; k < 2; k++) optimizer.accumulate(bowlGradient(optimizer, targets[i] ?? start), 4);
    }
    expect((await Promise.all(all.map((optimizer) => optimizer.maybeStep()))).every(Boolean)).toBe(true);
    expect(joiner.epoch).toBe(7);
    expect(bits(joiner.parameters)).toBe(bits(first.parameters));
    expect(bits(second.parameters)).toBe(bits(first.parameters));
  });

  it("overlaps a round with the next inner steps and carries their progress onto the new θ", async () => {
    const cfg = config({
      training: { targetBatchSize: 8 },
      averaging: { strategy: "diloco", delayedParameterUpdates: true },
    });
    const swarm = new FakeSwarm(1, 8);
    swarm.manual = true;
    const optimizer = peer(swarm, 0, cfg);
    const target = vector(51);
    await optimizer.maybeStep();
    optimizer.accumulate(bowlGradient(optimizer, target), 8);
    const atRoundStart = optimizer.workingParameters.slice();
    expect(await optimizer.maybeStep()).toBe(true); // started in the background
    expect(optimizer.epoch).toBe(1);
    expect(bits(optimizer.parameters)).toBe(bits(start)); // not applied yet
    optimizer.accumulate(bowlGradient(optimizer, target), 8); // the next round's inner step
    const progressed = optimizer.workingParameters.slice();
    swarm.release(0);
    await optimizer.pendingStep();
    const theta = optimizer.parameters;
    expect(bits(theta)).not.toBe(bits(start));
    optimizer.workingParameters.forEach((value, i) => {
      const carried = (theta[i] ?? 0) + ((progressed[i] ?? 0) - (atRoundStart[i] ?? 0));
      expect(Math.abs(value - carried)).toBeLessThan(1e-6);
    });
    // The next round's pseudo-gradient is taken against the new θ and holds the carried progress.
    expect(optimizer.samplesAccumulated).toBe(8);
  });

  it("puts a failed round's samples back and averages everything the next time", async () => {
    const cfg = config({ training: { targetBatchSize: 8 }, averaging: { strategy: "diloco" } });
    const swarm = new FakeSwarm(1, 8);
    const optimizer = peer(swarm, 0, cfg);
    const target = vector(61);
    await optimizer.maybeStep();
    optimizer.accumulate(bowlGradient(optimizer, target), 8);
    swarm.failures = 1;
    expect(await optimizer.maybeStep()).toBe(false);
    expect(optimizer.samplesAccumulated).toBe(8);
    optimizer.accumulate(bowlGradient(optimizer, target), 8);
    const local = optimizer.workingParameters.slice();
    expect(await optimizer.maybeStep()).toBe(true);
    // Outer SGD at 0.7 with fresh momentum (Nesterov: 1.9 × Δ) from θ = start, Δ = start − local.
    optimizer.parameters.forEach((value, i) => {
      const delta = (start[i] ?? 0) - (local[i] ?? 0);
      expect(Math.abs(value - ((start[i] ?? 0) - 0.7 * 1.9 * delta))).toBeLessThan(1e-5);
    });
  });
});

describe("error feedback in the collaborative optimizer", () => {
  /** Keeps the largest-magnitude element only, as a stand-in for a lossy sparse codec. */
  function topOne(values: Float32Array): Float32Array {
    let best = 0;
    values.forEach((value, i) => {
      if (Math.abs(value) > Math.abs(values[best] ?? 0)) best = i;
    });
    const out = new Float32Array(values.length);
    out[best] = values[best] ?? 0;
    return out;
  }

  it.each([
    ["dedloc", 1],
    ["diloco", 1],
    ["dedloc", 0.5],
    ["diloco", 0.95],
  ] as const)(
    "%s, decay %s: what the rounds sent plus the residual kept is everything contributed, decayed",
    async (strategy, decay) => {
      const cfg = config({
        training: { targetBatchSize: 8 },
        averaging: { strategy },
        compression: { method: "topk", errorFeedbackDecay: decay },
      });
      const swarm = new FakeSwarm(2, 8);
      const sent: Float32Array[] = [];
      swarm.codec = (values) => {
        const kept = topOne(values);
        sent.push(kept);
        return kept;
      };
      const peers = [peer(swarm, 0, cfg), peer(swarm, 1, cfg)];
      for (const optimizer of peers) await optimizer.maybeStep();
      const contributed = new Float64Array(layout.size);
      const sentByPeer0 = new Float64Array(layout.size);
      const add = (into: Float64Array, j: number, value: number) => {
        into[j] = (into[j] ?? 0) + value;
      };
      const samples = [4, 8, 6, 4, 12];
      // e ← decay · e + what went in − what was sent, so both sums decay by round.
      const decayBoth = () => {
        for (let j = 0; j < layout.size; j++) {
          contributed[j] = (contributed[j] ?? 0) * decay;
          sentByPeer0[j] = (sentByPeer0[j] ?? 0) * decay;
        }
      };
      for (const [round, batch] of samples.entries()) {
        decayBoth();
        for (const [i, optimizer] of peers.entries()) {
          const gradient = vector(100 * round + i);
          if (i === 0 && strategy === "dedloc")
            gradient.forEach((value, j) => {
              add(contributed, j, value * batch);
            });
          const before = strategy === "diloco" && i === 0 ? optimizer.workingParameters.slice() : undefined;
          optimizer.accumulate(gradient, batch);
          if (before !== undefined) {
            optimizer.workingParameters.forEach((value, j) => {
              add(contributed, j, ((before[j] ?? 0) - value) * batch);
            });
          }
        }
        const firstSent = sent.length;
        expect(await Promise.all(peers.map((optimizer) => optimizer.maybeStep()))).toEqual([true, true]);
        // Peer 0's contribution was the first of the round: weight it by its samples.
        sent[firstSent]?.forEach((value, j) => {
          add(sentByPeer0, j, value * batch);
        });
      }
      // The residual is kept weighted: read it from the last residual handed back, times its weight.
      const residual = swarm.residuals.get(0)?.at(-1) ?? new Float32Array();
      const last = samples.at(-1) ?? 0;
      for (let j = 0; j < layout.size; j++) {
        expect((sentByPeer0[j] ?? 0) + (residual[j] ?? 0) * last).toBeCloseTo(contributed[j] ?? 0, 4);
      }
      // …and the codec really dropped something each round (this is not a lossless run).
      expect(residual.some((value) => value !== 0)).toBe(true);
    },
  );
});
