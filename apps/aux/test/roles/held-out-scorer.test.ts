import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { HeldOutScore } from "@barnraise/peer/held-out-evaluation";
import { parseExperimentConfig, type DatasetManifest } from "@barnraise/protocol";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBatchStream } from "../../../peer/src/data/batch-stream.ts";
import { createModel } from "../../../peer/src/models/create-model.ts";
import { hashName } from "../../../peer/src/seeded-random.ts";
import { selectBackend } from "../../../peer/src/tf/backend.ts";
import { serveDataset, type DatasetServer } from "../../../peer/test/data/dataset-fixture.ts";
import { DirectoryDatasetSource } from "../../../peer/test/support/directory-dataset-source.ts";
import { datasetsDir, prepareDatasets } from "../../../web/src/server/datasets/prepare-datasets.ts";
import { LocalObjectStore } from "../../../web/src/server/storage/local-object-store.ts";
import { CheckpointEvaluator } from "../../src/roles/checkpoint-evaluator.ts";
import { openHeldOutScorer } from "../../src/roles/held-out-scorer.ts";

/**
 * The aux's held-out evaluation with the real scorer: the peer's mnist-mlp on the WebAssembly
 * backend, reading the test split of a small real MNIST subset over HTTP as the platform serves
 * it. A state trained for a few hundred minibatches scores a far higher accuracy than the initial
 * weights, and the second evaluation reads the shards from the aux's cache.
 */

const config = parseExperimentConfig({ model: { preset: "mnist-mlp", hiddenUnits: [32] } });
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
  await selectBackend("wasm");
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
    const batches = createBatchStream({ source, split: "train", batchSize: 32, seed: 7, config, manifest });
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
