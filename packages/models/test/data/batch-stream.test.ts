import { type DatasetShard, parseExperimentConfig } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { createBatchStream } from "../../src/data/batch-stream.ts";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import type { DatasetSource } from "../../src/data/dataset-source.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import type { Batch, ImageBatch, MaskedTokenBatch } from "../../src/models/batch.ts";
import {
  type Dataset,
  type DatasetServer,
  mnistDataset,
  type Reply,
  serveDataset,
  settle,
  sha256,
  tokenDataset,
} from "./dataset-fixture.ts";
import { modelKindOf } from "../../src/models/model-kinds.ts";

const mnistConfig = parseExperimentConfig({ dataset: { shuffleBufferSize: 16 } });
const albertConfig = parseExperimentConfig({
  model: { kind: "albert-mlm", vocabSize: 1000, maxSequenceLength: 16 },
  optimizer: { name: "lamb" },
  dataset: { shuffleBufferSize: 32 },
});
const mnist = mnistDataset(95, 23, 10);
const tokens = tokenDataset(200, 30, 50);
let server: DatasetServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function sourceFor(
  dataset: Dataset,
  reply?: (target: string, n: number) => Reply,
): Promise<HttpDatasetSource> {
  server = await serveDataset(dataset, reply === undefined ? {} : { reply });
  return new HttpDatasetSource({
    serverUrl: server.url,
    dataset: dataset.manifest.name,
    retry: { attempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
  });
}

async function take(stream: AsyncGenerator<Batch, void, undefined>, count: number): Promise<Batch[]> {
  const out: Batch[] = [];
  for await (const batch of stream) {
    out.push(batch);
    if (out.length === count) break;
  }
  return out;
}

function images(batches: Batch[]): ImageBatch[] {
  return batches.map((batch) => {
    if (batch.kind !== "image") throw new Error("expected an image batch");
    return batch;
  });
}

/** The fixture's record id, read back from the scaled pixels. */
function ids(batch: ImageBatch): number[] {
  return Array.from({ length: batch.size }, (_, r) => {
    const low = Math.round((batch.pixels[784 * r] ?? 0) * 255);
    const high = Math.round((batch.pixels[784 * r + 1] ?? 0) * 255);
    return low | (high << 8);
  });
}

describe("createBatchStream", () => {
  it("streams shuffled mnist train batches, seeded per peer", async () => {
    const source = await sourceFor(mnist);
    const options = {
      source,
      split: "train",
      batchSize: 8,
      seed: 11,
      config: mnistConfig,
      kind: modelKindOf(mnistConfig.model),
      prefetch: 2,
    } as const;
    const batches = images(await take(createBatchStream(options), 24)); // two passes and more
    for (const batch of batches) {
      expect(batch.size).toBe(8);
      expect(batch.pixels).toHaveLength(8 * 784);
      expect([...batch.labels]).toEqual(ids(batch).map((id) => id % 10));
      expect(batch.pixels[784 * 3 + 100]).toBeCloseTo((((ids(batch)[3] ?? 0) * 7) % 256) / 255, 6);
    }
    const seen = batches.flatMap(ids);
    const counts = new Map<number, number>();
    for (const id of seen) counts.set(id, (counts.get(id) ?? 0) + 1);
    expect(counts.size).toBe(95);
    expect(Math.max(...counts.values())).toBeLessThanOrEqual(3);
    expect(seen.slice(0, 40)).not.toEqual([...seen.slice(0, 40)].sort((a, b) => a - b));

    const again = images(await take(createBatchStream(options), 24));
    expect(again.map(ids)).toEqual(batches.map(ids));
    const other = images(await take(createBatchStream({ ...options, seed: 12 }), 24));
    expect(other.map(ids)).not.toEqual(batches.map(ids));
  });

  it("reads the test split once, in order, with a short last batch", async () => {
    const source = await sourceFor(mnist);
    const batches = images(
      await take(
        createBatchStream({
          source,
          split: "test",
          batchSize: 10,
          seed: 1,
          config: mnistConfig,
          kind: modelKindOf(mnistConfig.model),
        }),
        100,
      ),
    );
    expect(batches.map((b) => b.size)).toEqual([10, 10, 3]);
    expect(batches.flatMap(ids)).toEqual(Array.from({ length: 23 }, (_, i) => i));
  });

  it("builds masked-token batches from the token shards", async () => {
    const source = await sourceFor(tokens);
    const batches = await take(
      createBatchStream({
        source,
        split: "train",
        batchSize: 16,
        seed: 3,
        config: albertConfig,
        kind: modelKindOf(albertConfig.model),
      }),
      20,
    );
    expect(batches).toHaveLength(20);
    for (const batch of batches as MaskedTokenBatch[]) {
      expect(batch).toMatchObject({ kind: "masked-tokens", size: 16, sequenceLength: 16 });
      for (let r = 0; r < 16; r++) {
        expect(batch.inputIds[16 * r]).toBe(2);
        const labels = batch.labels.subarray(16 * r, 16 * r + 16);
        expect(labels.some((label) => label >= 0)).toBe(true);
        expect(labels[0]).toBe(-1);
      }
    }
  });

  it("refuses a dataset that does not fit the model", async () => {
    const source = await sourceFor(tokens);
    const wrongFormat = createBatchStream({
      source,
      split: "train",
      batchSize: 4,
      seed: 0,
      config: parseExperimentConfig({}),
      kind: modelKindOf(parseExperimentConfig({}).model),
      manifest: { ...tokens.manifest, name: "mnist" },
    });
    await expect(wrongFormat.next()).rejects.toThrow(/mnist-mlp needs mnist-u8 records, not tokens-u16le/);
    const smallVocab = parseExperimentConfig({
      model: { kind: "albert-mlm", vocabSize: 64 },
      optimizer: { name: "lamb" },
    });
    const error: unknown = await createBatchStream({
      source,
      split: "train",
      batchSize: 4,
      seed: 0,
      config: smallVocab,
      kind: modelKindOf(smallVocab.model),
    })
      .next()
      .catch((e: unknown) => e);
    expect(isDatasetError(error, DatasetErrorCode.INCOMPATIBLE)).toBe(true);
    expect(String(error)).toMatch(/vocabulary has 1000 tokens but the model embeds only 64/);
    expect(() =>
      createBatchStream({
        source,
        split: "train",
        batchSize: 0,
        seed: 0,
        config: albertConfig,
        kind: modelKindOf(albertConfig.model),
      }),
    ).toThrow(/batchSize/);
  });

  it("fails on a malformed token shard even when its hash matches the manifest", async () => {
    const files = new Map(tokens.files);
    const shard = tokens.manifest.shards.find((s) => s.split === "test");
    const bytes = new Uint8Array(files.get(shard?.file ?? "") ?? []);
    bytes[bytes.length - 1] = 0x40; // the last token becomes ≥ 16384, beyond the vocabulary
    files.set(shard?.file ?? "", bytes);
    const manifest = {
      ...tokens.manifest,
      shards: tokens.manifest.shards.map((s): DatasetShard =>
        s === shard ? { ...s, sha256: sha256(bytes) } : s,
      ),
    };
    const source = await sourceFor({ manifest, files });
    const error: unknown = await take(
      createBatchStream({
        source,
        split: "test",
        batchSize: 4,
        seed: 0,
        config: albertConfig,
        kind: modelKindOf(albertConfig.model),
      }),
      100,
    ).catch((e: unknown) => e);
    expect(isDatasetError(error, DatasetErrorCode.SHARD_MALFORMED)).toBe(true);
  });

  it("releases pending downloads on return() and on abort", async () => {
    const http = await sourceFor(mnist, (target) =>
      target === "manifest" || target.endsWith("0.bin") ? "ok" : "hold",
    );
    const signals: AbortSignal[] = [];
    const source: DatasetSource = {
      manifest: (signal) => http.manifest(signal),
      shard: (shard, signal) => {
        if (signal !== undefined) signals.push(signal);
        return http.shard(shard, signal);
      },
    };
    // Test split in order: test-00000 is served, test-00001 and -00002 hang on the server.
    const stream = createBatchStream({
      source,
      split: "test",
      batchSize: 5,
      seed: 0,
      config: mnistConfig,
      kind: modelKindOf(mnistConfig.model),
      prefetch: 2,
    });
    expect((await stream.next()).done).toBe(false);
    while ((server?.requests.length ?? 0) < 4) await settle(1);
    expect(signals.map((s) => s.aborted)).toEqual([false, false, false]);
    await stream.return();
    expect(signals.map((s) => s.aborted)).toEqual([true, true, true]);

    const controller = new AbortController();
    const aborted = createBatchStream({
      source,
      split: "train",
      batchSize: 500,
      seed: 0,
      config: mnistConfig,
      kind: modelKindOf(mnistConfig.model),
      signal: controller.signal,
    });
    const pending = aborted.next();
    while (signals.length < 6) await settle(1);
    controller.abort(new Error("SIGINT"));
    await expect(pending).rejects.toThrow("SIGINT");
    expect(signals.every((s) => s.aborted)).toBe(true);
  });
});
