import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CachedDatasetSource } from "../../src/data/cached-dataset-source.ts";
import type { DatasetSource } from "../../src/data/dataset-source.ts";
import { mnistDataset } from "./dataset-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";

/** A source over the in-memory fixture that counts its shard downloads. */
function countingSource(): { source: DatasetSource; downloads: string[]; manifest: DatasetManifest } {
  const dataset = mnistDataset(40, 10, 20);
  const downloads: string[] = [];
  const source: DatasetSource = {
    manifest: () => Promise.resolve(dataset.manifest),
    shard: (shard: DatasetShard) => {
      downloads.push(shard.file);
      const bytes = dataset.files.get(shard.file);
      return bytes === undefined ? Promise.reject(new Error(shard.file)) : Promise.resolve(bytes.slice());
    },
  };
  return { source, downloads, manifest: dataset.manifest };
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "shard-cache-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("CachedDatasetSource", () => {
  it("downloads a shard once and then reads it from disk, named by its SHA-256", async () => {
    const { source, downloads, manifest } = countingSource();
    const shard = manifest.shards[0];
    if (shard === undefined) throw new Error("fixture has no shard");
    const first = await new CachedDatasetSource(source, directoryStore(dir)).shard(shard);
    const again = await new CachedDatasetSource(source, directoryStore(dir)).shard(shard);
    expect(again).toEqual(first);
    expect(downloads).toEqual([shard.file]);
    expect(await readdir(dir)).toEqual([`${shard.sha256}.shard`]);
  });

  it("downloads again when the cached file was damaged, and says so", async () => {
    const { source, downloads, manifest } = countingSource();
    const shard = manifest.shards[0];
    if (shard === undefined) throw new Error("fixture has no shard");
    const warnings: string[] = [];
    const cache = new CachedDatasetSource(source, directoryStore(dir), (message) => warnings.push(message));
    const good = await cache.shard(shard);
    const damaged = good.slice();
    damaged[10] = (damaged[10] ?? 0) ^ 0xff;
    await writeFile(join(dir, `${shard.sha256}.shard`), damaged);
    expect(await cache.shard(shard)).toEqual(good);
    expect(downloads).toHaveLength(2);
    expect(warnings.join("\n")).toMatch(/does not match the manifest/);
  });

  it("still serves shards when the cache directory cannot be written", async () => {
    const { source, manifest } = countingSource();
    const shard = manifest.shards[0];
    if (shard === undefined) throw new Error("fixture has no shard");
    const blocker = join(dir, "file");
    await writeFile(blocker, "not a directory");
    const warnings: string[] = [];
    const cache = new CachedDatasetSource(source, directoryStore(join(blocker, "cache")), (message) =>
      warnings.push(message),
    );
    expect((await cache.shard(shard)).byteLength).toBe(shard.bytes);
    expect(warnings.some((warning) => warning.startsWith("cannot cache a shard"))).toBe(true);
  });
});
