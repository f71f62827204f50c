import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { CsvError, parse, type Info } from "csv-parse";
import {
  DATASET_FORMAT_VERSION,
  type DatasetShard,
  type LabelKind,
  type TabularManifest,
} from "../../api/schemas/datasets.ts";
import type { ObjectStore } from "../storage/object-store.ts";
import { summarizeSplits, writeManifestFile } from "./manifest.ts";
import { ShardWriter } from "./shard-writer.ts";
import { buildUploadedDataset, type ImportProgress } from "./uploaded-dataset.ts";

/**
 * Converts a CSV file into a `tabular-f32` dataset, streaming: the file is read in chunks through
 * csv-parse and each data row is written as one fixed-size record (the features as float32
 * little-endian in column order, then the label as float32) through ShardWriter, so memory stays
 * flat whatever the file's size. The rules (header, label column, class ids, test split, errors)
 * are in the datasets README; every refusal is a CsvImportError naming the 1-based line of the
 * file (as an editor shows it) and the column.
 */

/** Every this-many-th data row (rows 10, 20, …) goes to the test split. */
export const CSV_TEST_EVERY = 10;
/** The longest CSV record accepted, in characters. */
export const MAX_RECORD_BYTES = 1 << 20;
/** Shards hold about this many bytes (whole records only). */
export const CSV_TARGET_SHARD_BYTES = 4 * 1024 * 1024;
/** The most classes (and the most features) a `tabular-f32` manifest may have. */
export const MAX_CLASSES = 65_536;
export const MAX_FEATURES = 65_536;
/** How often (in bytes read) progress is reported. */
const PROGRESS_EVERY_BYTES = 1 << 20;
/** Records are encoded into batches of about this size, handed to ShardWriter a batch at a time. */
const BATCH_BYTES = 64 * 1024;

export class CsvImportError extends Error {
  override readonly name = "CsvImportError";
  /** The 1-based line of the file the problem is on, when it is on one. */
  readonly line: number | undefined;
  readonly column: string | undefined;

  constructor(message: string, line?: number, column?: string) {
    super(message);
    this.line = line;
    this.column = column;
  }
}

export type CsvProgress = ImportProgress;

export interface CsvConversionOptions {
  /** The CSV file. */
  readonly source: string;
  /** The dataset's name (the manifest's `name`). */
  readonly name: string;
  /** The file's original name, recorded in `createdFrom.upload` (at most 255 characters kept). */
  readonly fileName: string;
  /** The label column's name; the last column when undefined. */
  readonly labelColumn?: string | undefined;
  readonly labelKind: LabelKind;
  /** Records per shard; by default as many as fit in about 4 MiB. */
  readonly recordsPerShard?: number;
  /** Called every MiB or so, and once at the end; never per row. */
  readonly onProgress?: (progress: CsvProgress) => void;
  /** Called once the header is read, with the label column it names. */
  readonly onHeader?: (header: {
    readonly labelColumn: string;
    readonly features: readonly string[];
  }) => void;
  /** Stops the conversion (it then rejects with the signal's reason). */
  readonly signal?: AbortSignal;
}

const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const CLASS_ID = /^\d+$/;

/**
 * Converts the CSV into shards and a manifest in `dir` (an empty directory). Deterministic: the same
 * file and options give byte-identical output.
 */
export async function convertCsv(
  options: CsvConversionOptions & { readonly dir: string },
): Promise<TabularManifest> {
  const { signal } = options;
  signal?.throwIfAborted();
  const hash = createHash("sha256");
  let bytesRead = 0;
  const input = createReadStream(options.source, { highWaterMark: 64 * 1024 });
  input.on("data", (chunk) => {
    hash.update(chunk as Buffer);
    bytesRead += chunk.length;
  });
  // A record (a row, or an unclosed quote swallowing the rest of the file) is held whole in memory
  // until it ends: bound it, so a malformed file cannot take the process's memory.
  const parser = parse({
    info: true,
    relax_column_count: true,
    bom: true,
    max_record_size: MAX_RECORD_BYTES,
  });
  input.on("error", (error) => parser.destroy(error));
  input.pipe(parser);
  const stop = () => {
    input.destroy();
    parser.destroy(signal?.reason instanceof Error ? signal.reason : new Error("the conversion was stopped"));
  };
  signal?.addEventListener("abort", stop, { once: true });

  let header: Header | undefined;
  let labels: LabelEncoder | undefined;
  let train: SplitOutput | undefined;
  let test: SplitOutput | undefined;
  let records = 0;
  let recordsPerShard = 0;
  let nextProgress = PROGRESS_EVERY_BYTES;
  let previousLine = 0;

  try {
    for await (const row of parser as AsyncIterable<{ record: string[]; info: Info }>) {
      const { record } = row;
      const line = previousLine + 1;
      previousLine = row.info.lines;
      // A blank line is one empty field: every dataset has at least two columns, so it is no row.
      if (record.length === 1 && (record[0] ?? "").trim() === "") continue;

      if (header === undefined) {
        header = readHeader(record, line, options.labelColumn);
        labels = new LabelEncoder(options.labelKind, header.labelName);
        recordsPerShard =
          options.recordsPerShard ?? Math.max(1, Math.floor(CSV_TARGET_SHARD_BYTES / header.recordBytes));
        train = new SplitOutput(
          new ShardWriter({ dir: options.dir, split: "train", recordsPerShard }),
          header.recordBytes,
        );
        test = new SplitOutput(
          new ShardWriter({ dir: options.dir, split: "test", recordsPerShard }),
          header.recordBytes,
        );
        options.onHeader?.({ labelColumn: header.labelName, features: header.featureNames });
        continue;
      }
      if (record.length !== header.columns) {
        throw new CsvImportError(
          `line ${line} has ${record.length} field${record.length === 1 ? "" : "s"}; the header has ${header.columns}`,
          line,
        );
      }

      records += 1;
      const output = (records % CSV_TEST_EVERY === 0 ? test : train) as SplitOutput;
      const view = output.view;
      let offset = output.used;
      for (const index of header.featureIndexes) {
        view.setFloat32(offset, featureValue(record[index] ?? "", line, header.names[index] ?? ""), true);
        offset += 4;
      }
      view.setFloat32(offset, (labels as LabelEncoder).encode(record[header.labelIndex] ?? "", line), true);
      output.used = offset + 4;
      if (output.full()) await output.flush();

      if (bytesRead >= nextProgress) {
        nextProgress = bytesRead + PROGRESS_EVERY_BYTES;
        options.onProgress?.({ bytesRead, records });
      }
    }
    await train?.flush();
    await test?.flush();
  } catch (error) {
    await train?.writer.abort();
    await test?.writer.abort();
    input.destroy();
    if (signal?.aborted === true) throw signal.reason;
    if (error instanceof CsvError && error.code === "CSV_MAX_RECORD_SIZE") {
      const line = typeof error.lines === "number" ? error.lines : undefined;
      throw new CsvImportError(
        `${line === undefined ? "" : `line ${line}: `}a record runs past ${MAX_RECORD_BYTES} characters; look for a quote that is never closed`,
        line,
      );
    }
    if (error instanceof CsvError) {
      const line = typeof error.lines === "number" ? error.lines : undefined;
      const where = line === undefined ? "" : `line ${line}: `;
      throw new CsvImportError(`${where}the file is not valid CSV (${error.message})`, line);
    }
    throw error;
  } finally {
    signal?.removeEventListener("abort", stop);
  }

  if (header === undefined || labels === undefined || train === undefined || test === undefined) {
    throw new CsvImportError("the file is empty: its first line must be a header naming the columns");
  }
  if (records === 0) {
    throw new CsvImportError("the file has a header but no data rows");
  }
  const shards: DatasetShard[] = [...(await train.writer.finish()), ...(await test.writer.finish())];
  options.onProgress?.({ bytesRead, records });

  const classes = labels.classes();
  const fileName = options.fileName.slice(0, 255) || "upload.csv";
  const manifest: TabularManifest = {
    name: options.name,
    formatVersion: DATASET_FORMAT_VERSION,
    format: "tabular-f32",
    description:
      `Imported from ${fileName}: ${header.featureNames.length} feature${header.featureNames.length === 1 ? "" : "s"}, ` +
      `label "${header.labelName}" (${classes === null ? "a value" : `${classes.length} class${classes.length === 1 ? "" : "es"}`})`,
    createdFrom: { upload: fileName, bytes: bytesRead, sha256: hash.digest("hex") },
    options: { recordsPerShard, testEvery: CSV_TEST_EVERY },
    splits: summarizeSplits(shards),
    shards,
    record: {
      bytes: header.recordBytes,
      features: { count: header.featureNames.length, names: header.featureNames, dtype: "float32" },
      label: { name: header.labelName, dtype: "float32", kind: options.labelKind, classes },
    },
  };
  await writeManifestFile(options.dir, manifest);
  return manifest;
}

/** Converts the CSV into dataset `name` of the store (see `buildUploadedDataset`). */
export async function importCsvDataset(
  options: CsvConversionOptions & { readonly storage: ObjectStore },
): Promise<TabularManifest> {
  return await buildUploadedDataset(options.storage, options.name, (dir) => convertCsv({ ...options, dir }));
}

/** One split's ShardWriter and the batch of encoded records waiting for it. */
class SplitOutput {
  readonly writer: ShardWriter;
  private readonly recordBytes: number;
  private readonly capacity: number;
  private buffer: Uint8Array;
  view: DataView;
  /** Bytes of `buffer` holding encoded records. */
  used = 0;

  constructor(writer: ShardWriter, recordBytes: number) {
    this.writer = writer;
    this.recordBytes = recordBytes;
    this.capacity = Math.max(1, Math.floor(BATCH_BYTES / recordBytes)) * recordBytes;
    this.buffer = new Uint8Array(this.capacity);
    this.view = new DataView(this.buffer.buffer);
  }

  full(): boolean {
    return this.used === this.capacity;
  }

  /** Hands the batch to the writer (which keeps it until its next flush) and starts a new one. */
  async flush(): Promise<void> {
    if (this.used === 0) return;
    const batch = this.buffer.subarray(0, this.used);
    this.buffer = new Uint8Array(this.capacity);
    this.view = new DataView(this.buffer.buffer);
    this.used = 0;
    await this.writer.writeRecords(batch, this.recordBytes);
  }
}

interface Header {
  readonly names: readonly string[];
  readonly columns: number;
  readonly labelIndex: number;
  readonly labelName: string;
  readonly featureIndexes: readonly number[];
  readonly featureNames: string[];
  readonly recordBytes: number;
}

function readHeader(fields: readonly string[], line: number, labelColumn: string | undefined): Header {
  const names = fields.map((field) => field.trim());
  if (names.length < 2) {
    throw new CsvImportError(
      `line ${line}: the header names only one column; a dataset needs at least one feature column and the label column`,
      line,
    );
  }
  if (names.length - 1 > MAX_FEATURES) {
    throw new CsvImportError(
      `line ${line}: the header has ${names.length - 1} feature columns; at most ${MAX_FEATURES} are supported`,
      line,
    );
  }
  const seen = new Set<string>();
  for (const [index, name] of names.entries()) {
    if (name === "") {
      throw new CsvImportError(`line ${line}: column ${index + 1} of the header has no name`, line);
    }
    if (seen.has(name)) {
      throw new CsvImportError(`line ${line}: the header names column "${name}" twice`, line, name);
    }
    seen.add(name);
  }
  const labelIndex = labelColumn === undefined ? names.length - 1 : names.indexOf(labelColumn.trim());
  if (labelIndex < 0) {
    const listed = names.slice(0, 20).map((name) => `"${name}"`);
    if (names.length > 20) listed.push(`and ${names.length - 20} more`);
    throw new CsvImportError(
      `line ${line}: the header has no column "${labelColumn}" to take the label from; its columns are ${listed.join(", ")}`,
      line,
      labelColumn,
    );
  }
  const featureIndexes = names.map((_, index) => index).filter((index) => index !== labelIndex);
  return {
    names,
    columns: names.length,
    labelIndex,
    labelName: names[labelIndex] ?? "",
    featureIndexes,
    featureNames: featureIndexes.map((index) => names[index] ?? ""),
    recordBytes: 4 * names.length,
  };
}

/** A field as a float32 value: a decimal number (optionally with an exponent) within float32's range. */
function featureValue(field: string, line: number, column: string): number {
  const text = NUMBER.test(field) ? field : field.trim();
  if (!NUMBER.test(text)) {
    throw new CsvImportError(
      `line ${line}, column "${column}": ${quote(text)} is not a number`,
      line,
      column,
    );
  }
  const value = Number(text);
  if (!Number.isFinite(Math.fround(value))) {
    throw new CsvImportError(
      `line ${line}, column "${column}": ${quote(text)} is too large for a float32 (at most about 3.4e38)`,
      line,
      column,
    );
  }
  return value;
}

function quote(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
}

/**
 * Labels to float32 values. `value`: the number itself. `class`: when the first data row's label is
 * a non-negative integer, every label must be one and is its own class id (classes "0" … max);
 * otherwise labels are class names, numbered in the order they first appear.
 */
class LabelEncoder {
  private readonly kind: LabelKind;
  private readonly column: string;
  private mode: "value" | "ids" | "names" | undefined;
  private firstLine = 0;
  private maxId = -1;
  private readonly names = new Map<string, number>();

  constructor(kind: LabelKind, column: string) {
    this.kind = kind;
    this.column = column;
    if (kind === "value") this.mode = "value";
  }

  encode(field: string, line: number): number {
    if (this.mode === "value") return featureValue(field, line, this.column);
    const text = field.trim();
    if (this.mode === undefined) {
      this.mode = CLASS_ID.test(text) ? "ids" : "names";
      this.firstLine = line;
    }
    if (this.mode === "ids") {
      if (!CLASS_ID.test(text)) {
        throw new CsvImportError(
          `line ${line}, column "${this.column}": ${quote(text)} is not a whole number; the label of the first ` +
            `data row (line ${this.firstLine}) is a class id, so every label must be one`,
          line,
          this.column,
        );
      }
      const id = Number(text);
      if (id >= MAX_CLASSES) {
        throw new CsvImportError(
          `line ${line}, column "${this.column}": class id ${text} is too large; a dataset has at most ` +
            `${MAX_CLASSES} classes (ids 0 to ${MAX_CLASSES - 1})`,
          line,
          this.column,
        );
      }
      if (id > this.maxId) this.maxId = id;
      return id;
    }
    const known = this.names.get(text);
    if (known !== undefined) return known;
    if (text === "") {
      throw new CsvImportError(
        `line ${line}, column "${this.column}": the label is empty`,
        line,
        this.column,
      );
    }
    if (this.names.size >= MAX_CLASSES) {
      throw new CsvImportError(
        `line ${line}, column "${this.column}": ${quote(text)} would be class ${this.names.size + 1}; a dataset ` +
          `has at most ${MAX_CLASSES} classes`,
        line,
        this.column,
      );
    }
    const id = this.names.size;
    this.names.set(text, id);
    return id;
  }

  /** The class names by id, or null for values. */
  classes(): string[] | null {
    if (this.kind === "value") return null;
    if (this.mode === "ids") return Array.from({ length: this.maxId + 1 }, (_, id) => String(id));
    return [...this.names.keys()];
  }
}
