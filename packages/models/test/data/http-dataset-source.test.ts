import { afterEach, describe, expect, it } from "vitest";
import { DatasetErrorCode, isDatasetError } from "../../src/data/dataset-error.ts";
import { HttpDatasetSource } from "../../src/data/http-dataset-source.ts";
import {
  type Dataset,
  type DatasetServer,
  mnistDataset,
  type Reply,
  serveDataset,
} from "./dataset-fixture.ts";

const fastRetry = { attempts: 3, baseDelayMs: 1, maxDelayMs: 2 };
let server: DatasetServer | undefined;

afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function sourceFor(
  dataset: Dataset,
  options: { reply?: (target: string, n: number) => Reply; manifestJson?: unknown } = {},
): Promise<HttpDatasetSource> {
  server = await serveDataset(dataset, options);
  return new HttpDatasetSource({
    serverUrl: `${server.url}/`,
    dataset: dataset.manifest.name,
    retry: fastRetry,
  });
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (isDatasetError(error)) return error.code;
    throw error;
  }
  return "resolved";
}

describe("HttpDatasetSource", () => {
  const dataset = mnistDataset(25, 7, 10);
  const shard = dataset.manifest.shards[1];
  if (shard === undefined) throw new Error("fixture has no second shard");

  it("reads and validates the manifest and verified shards", async () => {
    const source = await sourceFor(dataset);
    expect(await source.manifest()).toEqual(dataset.manifest);
    expect(await source.shard(shard)).toEqual(dataset.files.get(shard.file));
    expect(server?.requests).toEqual(["manifest", shard.file]);
  });

  it("refuses a manifest of format version 2", async () => {
    const source = await sourceFor(dataset, { manifestJson: { ...dataset.manifest, formatVersion: 2 } });
    await expect(source.manifest()).rejects.toThrow(/format version 2 is not supported/);
    expect(await codeOf(source.manifest())).toBe(DatasetErrorCode.FORMAT_UNSUPPORTED);
  });

  it("refuses a manifest that breaks the schema, contradicts itself or names another dataset", async () => {
    const badSha = {
      ...dataset.manifest,
      shards: dataset.manifest.shards.map((s) => ({ ...s, sha256: "XYZ" })),
    };
    expect(await codeOf((await sourceFor(dataset, { manifestJson: badSha })).manifest())).toBe(
      DatasetErrorCode.MANIFEST_INVALID,
    );
    await server?.close();
    const badTotals = {
      ...dataset.manifest,
      splits: { ...dataset.manifest.splits, test: { records: 1, bytes: 785, shards: 1 } },
    };
    const source = await sourceFor(dataset, { manifestJson: badTotals });
    await expect(source.manifest()).rejects.toThrow(/split test lists 1 shards, 7 records/);
    await server?.close();
    const renamed = { ...dataset.manifest, name: "other" };
    expect(await codeOf((await sourceFor(dataset, { manifestJson: renamed })).manifest())).toBe(
      DatasetErrorCode.MANIFEST_INVALID,
    );
    await server?.close();
    expect(await codeOf((await sourceFor(dataset, { manifestJson: "not an object" })).manifest())).toBe(
      DatasetErrorCode.FORMAT_UNSUPPORTED,
    );
  });

  it("says the dataset is not prepared on a 404, without retrying", async () => {
    const source = await sourceFor(dataset, { reply: () => 404 });
    await expect(source.manifest()).rejects.toThrow(/datasets:prepare/);
    expect(server?.requests).toEqual(["manifest"]);
  });

  it("rejects a tampered shard with SHARD_CORRUPT and does not retry it", async () => {
    const source = await sourceFor(dataset, { reply: (target) => (target === shard.file ? "tamper" : "ok") });
    const error: unknown = await source.shard(shard).catch((e: unknown) => e);
    expect(isDatasetError(error, DatasetErrorCode.SHARD_CORRUPT)).toBe(true);
    expect(String(error)).toMatch(/SHA-256 [0-9a-f]{64}, the manifest says/);
    expect(server?.requests).toEqual([shard.file]);
  });

  it("rejects a truncated shard and one longer than the manifest says", async () => {
    let source = await sourceFor(dataset, { reply: () => "truncate" });
    await expect(source.shard(shard)).rejects.toThrow(/has 7847 bytes, the manifest says 7850/);
    await server?.close();
    source = await sourceFor(dataset, { reply: () => "extra" });
    expect(await codeOf(source.shard(shard))).toBe(DatasetErrorCode.SHARD_CORRUPT);
  });

  it("retries a 500 and a dropped connection, then succeeds", async () => {
    const source = await sourceFor(dataset, {
      reply: (_target, n) => (n === 1 ? 500 : n === 2 ? "destroy" : "ok"),
    });
    expect(await source.shard(shard)).toEqual(dataset.files.get(shard.file));
    expect(server?.requests).toEqual([shard.file, shard.file, shard.file]);
  });

  it("gives up after the configured attempts with a clear message", async () => {
    const source = await sourceFor(dataset, { reply: () => 503 });
    const error: unknown = await source.shard(shard).catch((e: unknown) => e);
    expect(isDatasetError(error, DatasetErrorCode.DOWNLOAD_FAILED)).toBe(true);
    expect(String(error)).toMatch(/after 3 attempts \(last: HTTP 503/);
    expect(server?.requests).toHaveLength(3);
  });

  it("stops at once when aborted, even while the server holds the request", async () => {
    const source = await sourceFor(dataset, { reply: () => "hold" });
    const controller = new AbortController();
    const download = source.shard(shard, controller.signal);
    while (server?.requests.length === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    controller.abort(new Error("stopped by test"));
    await expect(download).rejects.toThrow("stopped by test");
    expect(server?.requests).toHaveLength(1);
  });

  it("uses the injected fetch", async () => {
    const seen: string[] = [];
    const fake: typeof fetch = (input) => {
      seen.push(input instanceof Request ? input.url : input.toString());
      return Promise.resolve(new Response(JSON.stringify(dataset.manifest)));
    };
    const source = new HttpDatasetSource({
      serverUrl: "http://platform.test",
      dataset: "mnist",
      fetch: fake,
    });
    expect((await source.manifest()).name).toBe("mnist");
    expect(seen).toEqual(["http://platform.test/api/v1/datasets/mnist"]);
  });
});
