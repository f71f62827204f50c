import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createBatchStream,
  createModel,
  hashName,
  type HeldOutScore,
  selectNodeBackend,
} from "@barnraise/models/node";
import { parseExperimentConfig, type DatasetManifest } from "@barnraise/protocol";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serveDataset, type DatasetServer } from "../../../../packages/models/test/data/dataset-fixture.ts";
import { DirectoryDatasetSource } from "../../../../packages/models/test/support/directory-dataset-source.ts";
import { datasetsDir, prepareDatasets } from "../../../web/src/server/datasets/prepare-datasets.ts";
import { LocalObjectStore } from "../../../web/src/server/storage/local-object-store.ts";
import { CheckpointEvaluator } from "../../src/roles/checkpoint-evaluator.ts";
import { ContributionValidator, type ContributionFlag } from "../../src/roles/contribution-validator.ts";
import { contributionStepScale } from "@barnraise/swarm";
import { openHeldOutScorer } from "../../src/roles/held-out-scorer.ts";
import { SharedScorer } from "../../src/roles/shared-scorer.ts";
import { modelKindOf } from "@barnraise/models";

/**
 * The aux's held-out evaluation with the real scorer: the peer's mnist-mlp on the WebAssembly
 * backend, reading the test split of a small real MNIST subset over HTTP as the platform serves
 * it. A state trained for a few hundred minibatches scores a far higher accuracy than the initial
 * weights, and the second evaluation reads the shards from the aux's cache. The contribution
 * validator, on the same model, flags a peer that sends its gradients sign-flipped and ×1,000.
 */

const config = parseExperimentConfig({ model: { kind: "mnist-mlp", hiddenUnits: [32] } });
const TRAIN_STEPS = 150;
const LEARNING_RATE = 0.1;

let root: string;
let manifest: DatasetManifest;
let server: DatasetServer;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "aux-held-out-"));
  await prepareDatasets({
    storage: new LocalObjectStore(root),
    datasets: ["mnist"],
    limit: 3_000,
    recordsPerShard: 500,
  });
  const directory = join(datasetsDir(root), "mnist");
  const source = new DirectoryDatasetSource({ dir: directory, dataset: "mnist" });
  manifest = await source.manifest();
  const files = new Map<string, Uint8Array>();
  for (const shard of manifest.shards) files.set(shard.file, await readFile(join(directory, shard.file)));
  server = await serveDataset({ manifest, files });
  await selectNodeBackend("wasm");
}, 120_000);

afterAll(async () => {
  await server.close();
  await rm(root, { recursive: true, force: true });
});

/** The initial parameters, and those after TRAIN_STEPS steps of plain SGD on the train split. */
async function initialAndTrained(): Promise<{ initial: Float32Array; trained: Float32Array }> {
  const model = createModel(config.model);
  try {
    const initial = model.initialParameters(hashName("held-out test"));
    const trained = initial.slice();
    const source = new DirectoryDatasetSource({ dir: join(datasetsDir(root), "mnist"), dataset: "mnist" });
    const batches = createBatchStream({
      source,
      split: "train",
      batchSize: 32,
      seed: 7,
      config,
      kind: modelKindOf(config.model),
      manifest,
    });
    let steps = 0;
    for await (const batch of batches) {
      model.setParameters(trained);
      const { gradient } = await model.computeGradients(batch, steps);
      for (let i = 0; i < trained.length; i++)
        trained[i] = (trained[i] ?? 0) - LEARNING_RATE * (gradient[i] ?? 0);
      if (++steps === TRAIN_STEPS) break;
    }
    return { initial, trained };
  } finally {
    model.dispose();
  }
}

describe("the aux's held-out evaluation of mnist-mlp checkpoints", () => {
  it("scores the trained state far above the initial weights, reading the test split once", async () => {
    const { initial, trained } = await initialAndTrained();
    const logger = pino({ level: "silent" });
    const stop = new AbortController();
    const auxDir = join(root, "aux");
    const reports: { checkpointId: string; score: HeldOutScore }[] = [];
    const evaluator = new CheckpointEvaluator({
      logger,
      signal: stop.signal,
      openScorer: (signal) =>
        openHeldOutScorer({ config, server: new URL(server.url), dataDir: auxDir, logger, signal }),
      report: (checkpointId, score) => {
        reports.push({ checkpointId, score });
        return Promise.resolve();
      },
    });
    try {
      evaluator.offer({ checkpointId: "initial", step: 0, parameters: initial });
      await evaluator.idle();
      const shardRequests = () => server.requests.filter((target) => target !== "manifest").length;
      const downloaded = shardRequests();
      evaluator.offer({ checkpointId: "trained", step: TRAIN_STEPS, parameters: trained });
      await evaluator.idle();

      const testRecords = manifest.splits.test.records;
      expect(reports.map((report) => report.checkpointId)).toEqual(["initial", "trained"]);
      const [before, after] = reports.map((report) => report.score);
      expect(before).toMatchObject({ metric: "accuracy", samples: testRecords });
      expect(after).toMatchObject({ metric: "accuracy", samples: testRecords });
      expect(after?.value ?? 0).toBeGreaterThan((before?.value ?? 1) + 0.3);
      expect(after?.value ?? 0).toBeGreaterThan(0.7);
      expect(after?.loss ?? Infinity).toBeLessThan(before?.loss ?? 0);

      // The test split came over HTTP once, into the cache under the aux's data directory.
      const testShards = manifest.shards.filter((shard) => shard.split === "test");
      expect(downloaded).toBe(testShards.length);
      expect(shardRequests()).toBe(downloaded);
      const cached = await readdir(join(auxDir, "datasets", "mnist"));
      expect(cached.sort()).toEqual(testShards.map((shard) => `${shard.sha256}.shard`).sort());
    } finally {
      stop.abort();
      await evaluator.close();
    }
  }, 120_000);
});

/** Mean gradients of the model at `parameters` over `count` minibatches of 64 from `seed`'s shuffle. */
async function gradientsAt(parameters: Float32Array, seed: number, count: number): Promise<Float32Array[]> {
  const model = createModel(config.model);
  try {
    model.setParameters(parameters);
    const source = new DirectoryDatasetSource({ dir: join(datasetsDir(root), "mnist"), dataset: "mnist" });
    const batches = createBatchStream({
      source,
      split: "train",
      batchSize: 64,
      seed,
      config,
      kind: modelKindOf(config.model),
      manifest,
    });
    const gradients: Float32Array[] = [];
    for await (const batch of batches) {
      gradients.push((await model.computeGradients(batch, 0)).gradient.slice());
      if (gradients.length === count) break;
    }
    await batches.return();
    return gradients;
  } finally {
    model.dispose();
  }
}

/** Each of `senders` contributions: the mean gradient of 4 minibatches, as a round averages a peer's share. */
async function contributionsAt(
  parameters: Float32Array,
  seed: number,
  senders: number,
): Promise<Float32Array[]> {
  const gradients = await gradientsAt(parameters, seed, 4 * senders);
  return Array.from({ length: senders }, (_, k) => {
    const mean = new Float32Array(parameters.length);
    for (const gradient of gradients.slice(4 * k, 4 * k + 4)) {
      for (let i = 0; i < mean.length; i++) mean[i] = (mean[i] ?? 0) + (gradient[i] ?? 0) / 4;
    }
    return mean;
  });
}

describe("the aux's contribution validator on mnist-mlp", () => {
  it("flags the peer whose gradients are sign-flipped and ×1,000 within a few rounds, and none of the honest ones", async () => {
    const { trained } = await initialAndTrained();
    const logger = pino({ level: process.env.VALIDATOR_DEBUG === undefined ? "silent" : "debug" });
    const stop = new AbortController();
    const shared = new SharedScorer((signal) =>
      openHeldOutScorer({ config, server: new URL(server.url), dataDir: join(root, "aux"), logger, signal }),
    );
    const flags: ContributionFlag[] = [];
    const validator = new ContributionValidator({
      logger,
      signal: stop.signal,
      parameters: () => ({ step: TRAIN_STEPS, generation: 0, parameters: trained }),
      generation: () => 0,
      openScorer: (signal) => shared.open(signal),
      report: (flag) => {
        flags.push(flag);
        return Promise.resolve();
      },
      stepScale: contributionStepScale(
        parseExperimentConfig({ optimizer: { name: "adam", learningRate: 0.01 } }),
      ),
      batches: 4,
    });
    // The aux's part: the first layer's weights from the middle of the vector on, as a load-balanced
    // part of a larger group would be.
    const part = { start: 5_000, end: 20_000 };
    try {
      // Two samples that hurt flag it; a round whose median step does not descend is not judged.
      for (let epoch = 0; epoch < 4 && validator.flagged().length === 0; epoch++) {
        const [a, b, c, d] = await contributionsAt(trained, 100 + epoch, 4);
        const senders = new Map([
          ["honest-a", a],
          ["honest-b", b],
          ["honest-c", c],
          ["attacker", d?.map((value) => value * -1000)],
        ]);
        for (const [peerId, gradient] of senders) {
          if (gradient === undefined) throw new Error("too few gradients");
          validator.observe({
            epoch,
            groupId: `g${epoch}`,
            peerId,
            weight: 64,
            part,
            start: part.start,
            values: gradient.subarray(part.start, part.end),
          });
        }
        validator.finish(epoch);
        await validator.idle();
      }
      expect(validator.roundsScored).toBe(2);
      expect(validator.flagged()).toEqual(["attacker"]);
      expect(flags).toHaveLength(1);
      const [flag] = flags;
      expect(flag).toMatchObject({ peerId: "attacker", hurtSamples: 2, recentSamples: 2 });
      expect(flag?.normRatio ?? 0).toBeGreaterThan(100);
      expect(flag?.lossAfter ?? Infinity).toBeGreaterThan(flag?.baselineLoss ?? Infinity);
    } finally {
      stop.abort();
      await validator.close();
    }
  }, 120_000);
});
