import type { DatasetShard } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import type { DatasetSource } from "../../src/data/dataset-source.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import { decodeMnistShard, type MnistRecord } from "../../src/data/mnist-decoder.ts";
import { type LoadedShard, ShardStream } from "../../src/data/shard-stream.ts";
import {
  type DatasetServer,
  mnistDataset,
  mnistId,
  type Reply,
  serveDataset,
  settle,
} from "./dataset-fixture.ts";

const dataset = mnistDataset(95, 23, 10); // train: 10 shards (the last with 5), test: 3 shards
let server: DatasetServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** An HTTP source that also records each download's start, end and abort signal. */
class CountingSource implements DatasetSource {
  started = 0;
  finished = 0;
  readonly signals: AbortSignal[] = [];
  readonly #inner: HttpDatasetSource;

  constructor(inner: HttpDatasetSource) {
    this.#inner = inner;
  }

  manifest(signal?: AbortSignal): ReturnType<DatasetSource["manifest"]> {
    return this.#inner.manifest(signal);
  }

  async shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array> {
    this.started++;
    if (signal !== undefined) this.signals.push(signal);
    try {
      return await this.#inner.shard(shard, signal);
    } finally {
      this.finished++;
    }
  }
}

async function start(reply?: (target: string, n: number) => Reply): Promise<CountingSource> {
  server = await serveDataset(dataset, reply === undefined ? {} : { reply });
  return new CountingSource(
    new HttpDatasetSource({
      serverUrl: server.url,
      dataset: "mnist",
      retry: { attempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
    }),
  );
}

function stream(
  source: DatasetSource,
  split: "train" | "test",
  seed: number,
  prefetch: number,
): ShardStream<MnistRecord> {
  return new ShardStream({
    source,
    manifest: dataset.manifest,
    split,
    seed,
    prefetch,
    decode: (bytes, shard) => decodeMnistShard(bytes, shard.file, shard.records),
  });
}

async function take<T>(iterator: AsyncGenerator<T>, count: number): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < count; i++) {
    const next = await iterator.next();
    if (next.done === true) break;
    out.push(next.value);
  }
  return out;
}

describe("ShardStream", () => {
  it("visits every train record exactly once per pass, in a new shard order each pass", async () => {
    const shards = stream(await start(), "train", 7, 2).shards();
    const loaded = await take(shards, 30); // three passes over 10 shards
    await shards.return(undefined);
    for (let pass = 0; pass < 3; pass++) {
      const inPass = loaded.filter((shard) => shard.pass === pass);
      const ids = inPass.flatMap((shard) => shard.records.map((record) => mnistId(record.pixels)));
      expect(ids.sort((a, b) => a - b)).toEqual(Array.from({ length: 95 }, (_, i) => i));
    }
    const orders = [0, 1, 2].map((pass) =>
      loaded.filter((shard) => shard.pass === pass).map((shard) => shard.shard.file),
    );
    expect(new Set(orders.map((order) => order.join())).size).toBe(3);
  });

  it("gives two seeds different shard orders, and one seed the same order every time", async () => {
    const source = await start();
    const a = stream(source, "train", 1, 0);
    const b = stream(source, "train", 2, 0);
    expect(a.passOrder(0).map((s) => s.file)).not.toEqual(b.passOrder(0).map((s) => s.file));
    expect(stream(source, "train", 1, 0).passOrder(3)).toEqual(a.passOrder(3));
    const streamed = await take(a.shards(), 10);
    expect(streamed.map((s) => s.shard.file)).toEqual(a.passOrder(0).map((s) => s.file));
  });

  it("reads the test split once, in order, then ends", async () => {
    const records: number[] = [];
    for await (const record of stream(await start(), "test", 5, 1)) records.push(mnistId(record.pixels));
    expect(records).toEqual(Array.from({ length: 23 }, (_, i) => i));
    expect(server?.requests).toEqual(["test-00000.bin", "test-00001.bin", "test-00002.bin"]);
  });

  it("downloads `prefetch` shards ahead of a paused consumer, and never more", async () => {
    for (const prefetch of [0, 1, 3]) {
      const source = await start();
      const shards = stream(source, "train", 3, prefetch).shards();
      let received = 0;
      for (let i = 0; i < 12; i++) {
        const next = await shards.next();
        expect(next.done).toBe(false);
        received++;
        // The consumer pauses here; let the background downloads run to completion.
        while (source.finished < source.started) await settle(1);
        await settle();
        expect(source.started - received).toBe(prefetch);
        expect(server?.requests).toHaveLength(received + prefetch);
      }
      await shards.return(undefined);
      await server?.close();
    }
  });

  it("cancels pending downloads when the consumer stops", async () => {
    const first = stream(await start(), "train", 0, 3).passOrder(0)[0];
    await server?.close();
    // Serve only the first shard of the order; the three prefetched ones hang on the server.
    server = await serveDataset(dataset, { reply: (target) => (target === first?.file ? "ok" : "hold") });
    const source = new CountingSource(new HttpDatasetSource({ serverUrl: server.url, dataset: "mnist" }));
    const shards = stream(source, "train", 0, 3).shards();
    const loaded: IteratorResult<LoadedShard<MnistRecord>> = await shards.next();
    expect(loaded.done === false && loaded.value.shard.file).toBe(first?.file);
    while (server.requests.length < 4) await settle(1);
    expect(source.signals.every((signal) => !signal.aborted)).toBe(true);
    await shards.return(undefined);
    expect(source.signals).toHaveLength(4);
    expect(source.signals.every((signal) => signal.aborted)).toBe(true);
    while (source.finished < source.started) await settle(1);
  });

  it("stops with the caller's abort reason", async () => {
    const source = await start(() => "hold");
    const controller = new AbortController();
    const records = new ShardStream({
      source,
      manifest: dataset.manifest,
      split: "train",
      seed: 1,
      prefetch: 1,
      decode: (bytes, shard) => decodeMnistShard(bytes, shard.file),
      signal: controller.signal,
    }).records();
    const next = records.next();
    while ((server?.requests.length ?? 0) < 2) await settle(1);
    controller.abort(new Error("peer shutting down"));
    await expect(next).rejects.toThrow("peer shutting down");
  });

  it("surfaces a corrupt shard as an error of the stream", async () => {
    const source = await start((target) => (target.startsWith("test-00001") ? "tamper" : "ok"));
    const seen: number[] = [];
    const reading = (async () => {
      for await (const record of stream(source, "test", 0, 2)) seen.push(mnistId(record.pixels));
    })();
    await expect(reading).rejects.toThrow(/test-00001\.bin has SHA-256/);
    expect(seen).toHaveLength(10);
  });

  it("refuses a train split without records", () => {
    const empty = { ...dataset.manifest, shards: dataset.manifest.shards.filter((s) => s.split === "test") };
    expect(
      () =>
        new ShardStream({
          source: new CountingSource(new HttpDatasetSource({ serverUrl: "http://x.test", dataset: "mnist" })),
          manifest: empty,
          split: "train",
          seed: 0,
          prefetch: 1,
          decode: () => [],
        }),
    ).toThrow(/no train records/);
  });
});
