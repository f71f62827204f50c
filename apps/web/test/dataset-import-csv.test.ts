import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { datasetManifestSchema, type TabularManifest } from "../src/api/schemas/datasets.ts";
import {
  CsvImportError,
  importCsvDataset,
  type CsvConversionOptions,
  type CsvProgress,
  MAX_RECORD_BYTES,
} from "../src/server/datasets/csv-import.ts";
import { DatasetExistsError } from "../src/server/datasets/dataset-publish.ts";
import { listDatasets } from "../src/server/datasets/dataset-store.ts";
import { LocalObjectStore } from "../src/server/storage/local-object-store.ts";

/**
 * CSV → `tabular-f32`: the shards and manifest of a small file checked byte by byte against records
 * built here by hand, and every refusal with its own message naming the file's line and column.
 */

let dir: string;
let counter = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "csv-import-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A fresh data directory and the CSV written into it. */
async function csvFile(text: string | Uint8Array): Promise<{ dataDir: string; source: string }> {
  counter += 1;
  const dataDir = join(dir, `data-${counter}`);
  const source = join(dir, `file-${counter}.csv`);
  await writeFile(source, text);
  return { dataDir, source };
}

type Options = Partial<Omit<CsvConversionOptions, "source">>;

async function convert(text: string | Uint8Array, options: Options = {}) {
  const { dataDir, source } = await csvFile(text);
  const manifest = await importCsvDataset({
    storage: new LocalObjectStore(dataDir),
    source,
    name: "table",
    fileName: "table.csv",
    labelKind: "class",
    ...options,
  });
  return { manifest, dataDir, source };
}

/** No dataset was published, and the build's scratch directory is gone. */
async function expectNothingLeft(dataDir: string): Promise<void> {
  expect(await readdir(dataDir)).toEqual([".staging"]);
  expect(await readdir(join(dataDir, ".staging"))).toEqual([]);
}

async function refusal(text: string, options: Options = {}): Promise<CsvImportError> {
  const { dataDir, source } = await csvFile(text);
  const error = await importCsvDataset({
    storage: new LocalObjectStore(dataDir),
    source,
    name: "bad",
    fileName: "bad.csv",
    labelKind: "class",
    ...options,
  }).then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(CsvImportError);
  // Nothing is left behind: no dataset, no half-built files.
  await expectNothingLeft(dataDir);
  return error as CsvImportError;
}

/** Records of float32 little-endian values, built without the converter's code. */
function f32Records(rows: readonly (readonly number[])[]): Uint8Array {
  const bytes = new Uint8Array(rows.length * (rows[0]?.length ?? 0) * 4);
  const view = new DataView(bytes.buffer);
  let offset = 0;
  for (const row of rows) {
    for (const value of row) {
      view.setFloat32(offset, value, true);
      offset += 4;
    }
  }
  return bytes;
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

// Line numbers as an editor shows them; line 4 is blank, line 6 quotes a number, line 12 is data row
// 10 (the test split's only row).
const IRIS = [
  " sepal length , sepal width ,species",
  "5.1,3.5,setosa",
  "4.9,3.0,setosa",
  "",
  "7.0,3.2,versicolor",
  '"6.4",3.2,versicolor',
  "6.3,3.3, virginica",
  "5.8,2.7,virginica",
  "-1.5e1,.5,setosa",
  '0,+0.25,"virginica"',
  "1,2,setosa",
  "3,4,versicolor",
  "5,6,virginica",
  "7,8,setosa",
  "",
].join("\n");
const IRIS_ROWS = [
  [5.1, 3.5, 0],
  [4.9, 3.0, 0],
  [7.0, 3.2, 1],
  [6.4, 3.2, 1],
  [6.3, 3.3, 2],
  [5.8, 2.7, 2],
  [-15, 0.5, 0],
  [0, 0.25, 2],
  [1, 2, 0],
  [3, 4, 1], // data row 10: test
  [5, 6, 2],
  [7, 8, 0],
];

describe("CSV to tabular-f32", () => {
  it("writes the records, shards and manifest byte by byte", async () => {
    const { manifest, dataDir, source } = await convert(IRIS, {
      name: "iris",
      fileName: "iris.csv",
      recordsPerShard: 4,
    });
    const train = IRIS_ROWS.filter((_, index) => (index + 1) % 10 !== 0);
    const test = [IRIS_ROWS[9] ?? []];
    const trainShards = [train.slice(0, 4), train.slice(4, 8), train.slice(8)].map(f32Records);
    const testShards = [f32Records(test)];
    const shard = (file: string, split: "train" | "test", bytes: Uint8Array) => ({
      file,
      split,
      records: bytes.byteLength / 12,
      bytes: bytes.byteLength,
      sha256: sha256(bytes),
    });
    const expected: TabularManifest = {
      name: "iris",
      formatVersion: 1,
      format: "tabular-f32",
      description: 'Imported from iris.csv: 2 features, label "species" (3 classes)',
      createdFrom: { upload: "iris.csv", bytes: Buffer.byteLength(IRIS), sha256: sha256(Buffer.from(IRIS)) },
      options: { recordsPerShard: 4, testEvery: 10 },
      splits: {
        train: { records: 11, bytes: 132, shards: 3 },
        test: { records: 1, bytes: 12, shards: 1 },
      },
      shards: [
        shard("train-00000.bin", "train", trainShards[0] ?? new Uint8Array()),
        shard("train-00001.bin", "train", trainShards[1] ?? new Uint8Array()),
        shard("train-00002.bin", "train", trainShards[2] ?? new Uint8Array()),
        shard("test-00000.bin", "test", testShards[0] ?? new Uint8Array()),
      ],
      record: {
        bytes: 12,
        features: { count: 2, names: ["sepal length", "sepal width"], dtype: "float32" },
        label: {
          name: "species",
          dtype: "float32",
          kind: "class",
          classes: ["setosa", "versicolor", "virginica"],
        },
      },
    };
    expect(manifest).toEqual(expected);

    const datasetDir = join(dataDir, "datasets", "iris");
    expect((await readdir(datasetDir)).sort()).toEqual([
      "manifest.json",
      "test-00000.bin",
      "train-00000.bin",
      "train-00001.bin",
      "train-00002.bin",
    ]);
    expect(new Uint8Array(await readFile(join(datasetDir, "train-00000.bin")))).toEqual(trainShards[0]);
    expect(new Uint8Array(await readFile(join(datasetDir, "train-00001.bin")))).toEqual(trainShards[1]);
    expect(new Uint8Array(await readFile(join(datasetDir, "train-00002.bin")))).toEqual(trainShards[2]);
    expect(new Uint8Array(await readFile(join(datasetDir, "test-00000.bin")))).toEqual(testShards[0]);
    const onDisk = await readFile(join(datasetDir, "manifest.json"), "utf8");
    expect(onDisk).toBe(`${JSON.stringify(expected, null, 2)}\n`);
    expect(datasetManifestSchema.parse(JSON.parse(onDisk))).toEqual(expected);
    // The platform lists it like a prepared dataset.
    expect(await listDatasets(new LocalObjectStore(dataDir))).toEqual([
      {
        name: "iris",
        format: "tabular-f32",
        formatVersion: 1,
        description: expected.description,
        createdFrom: expected.createdFrom,
        splits: expected.splits,
      },
    ]);
    expect(source).toMatch(/\.csv$/);
  });

  it("is deterministic, and reads CRLF line ends and a UTF-8 BOM like LF", async () => {
    const first = await convert(IRIS, { name: "iris" });
    const second = await convert(IRIS, { name: "iris" });
    expect(second.manifest).toEqual(first.manifest);
    const crlf = await convert(`\ufeff${IRIS.replaceAll("\n", "\r\n")}`, { name: "iris" });
    expect(crlf.manifest.shards).toEqual(first.manifest.shards);
    expect(crlf.manifest.record).toEqual(first.manifest.record);
  });

  it("takes whole-number labels as class ids, classes 0 … the largest", async () => {
    const { manifest, dataDir } = await convert("a,label,b\n1,2,3\n4,0,5\n6,2,7\n", {
      labelColumn: "label",
      recordsPerShard: 10,
    });
    expect(manifest.record.label).toEqual({
      name: "label",
      dtype: "float32",
      kind: "class",
      classes: ["0", "1", "2"],
    });
    expect(manifest.record.features.names).toEqual(["a", "b"]);
    const bytes = new Uint8Array(await readFile(join(dataDir, "datasets", "table", "train-00000.bin")));
    expect(bytes).toEqual(
      f32Records([
        [1, 3, 2],
        [4, 5, 0],
        [6, 7, 2],
      ]),
    );
  });

  it("takes the label column by name, and values for regression", async () => {
    const { manifest, dataDir } = await convert("price,rooms,area\n250000.5,3,70\n1e5,1,31.25\n", {
      labelColumn: "price",
      labelKind: "value",
    });
    expect(manifest.record).toEqual({
      bytes: 12,
      features: { count: 2, names: ["rooms", "area"], dtype: "float32" },
      label: { name: "price", dtype: "float32", kind: "value", classes: null },
    });
    expect(manifest.description).toBe('Imported from table.csv: 2 features, label "price" (a value)');
    const bytes = new Uint8Array(await readFile(join(dataDir, "datasets", "table", "train-00000.bin")));
    expect(bytes).toEqual(
      f32Records([
        [3, 70, 250000.5],
        [1, 31.25, 1e5],
      ]),
    );
  });

  it("reports progress every MiB or so and once at the end, never per row", async () => {
    const lines = ["x,y,label"];
    for (let row = 0; row < 100_000; row += 1) lines.push(`${row * 0.5},${row % 97},${row % 3}`);
    const text = `${lines.join("\n")}\n`;
    const reports: CsvProgress[] = [];
    const { manifest } = await convert(text, { onProgress: (progress) => reports.push(progress) });
    expect(reports.length).toBeGreaterThan(1);
    expect(reports.length).toBeLessThan(20);
    expect(reports.at(-1)).toEqual({ bytesRead: Buffer.byteLength(text), records: 100_000 });
    for (let index = 1; index < reports.length; index += 1) {
      expect(reports[index]?.bytesRead).toBeGreaterThanOrEqual(reports[index - 1]?.bytesRead ?? 0);
    }
    expect(manifest.splits.test.records).toBe(10_000);
    expect(manifest.splits.train.records).toBe(90_000);
  });

  it("never replaces a dataset of the same name", async () => {
    const { dataDir, source } = await csvFile(IRIS);
    const first = await importCsvDataset({
      storage: new LocalObjectStore(dataDir),
      source,
      name: "iris",
      fileName: "a.csv",
      labelKind: "class",
    });
    const again = importCsvDataset({
      storage: new LocalObjectStore(dataDir),
      source,
      name: "iris",
      fileName: "b.csv",
      labelKind: "value",
      labelColumn: "sepal width",
    });
    await expect(again).rejects.toThrow(DatasetExistsError);
    await expect(again).rejects.toThrow('a dataset named "iris" already exists');
    expect(await readdir(join(dataDir, "datasets"))).toEqual(["iris"]);
    const manifest = JSON.parse(
      await readFile(join(dataDir, "datasets", "iris", "manifest.json"), "utf8"),
    ) as unknown;
    expect(manifest).toEqual(first);
  });

  it("stops when its signal aborts, leaving nothing behind", async () => {
    const lines = ["x,label"];
    for (let row = 0; row < 200_000; row += 1) lines.push(`${row},${row % 2}`);
    const { dataDir, source } = await csvFile(lines.join("\n"));
    const controller = new AbortController();
    const stopped = importCsvDataset({
      storage: new LocalObjectStore(dataDir),
      source,
      name: "stopped",
      fileName: "x.csv",
      labelKind: "class",
      signal: controller.signal,
      onProgress: () => {
        controller.abort(new Error("stop now"));
      },
    });
    await expect(stopped).rejects.toThrow("stop now");
    await expectNothingLeft(dataDir);
  });
});

describe("CSV refusals name the line and column", () => {
  it("a ragged row", async () => {
    const rows = ["a,b,c,d,label"];
    for (let line = 2; line <= 16; line += 1) rows.push(`${line},1,2,3,0`);
    rows.push("1,2,3,4", "1,2,3,4,5");
    const error = await refusal(rows.join("\n"));
    expect(error.message).toBe("line 17 has 4 fields; the header has 5");
    expect(error.line).toBe(17);
  });

  it("a feature that is not a number", async () => {
    const rows = ["age,height,label"];
    for (let line = 2; line <= 8; line += 1) rows.push(`${line},1.5,0`);
    rows.push("abc,1,0");
    const error = await refusal(rows.join("\n"));
    expect(error.message).toBe('line 9, column "age": "abc" is not a number');
    expect([error.line, error.column]).toEqual([9, "age"]);
    // Empty fields, hex, NaN and Infinity are not numbers either.
    for (const bad of ["", "0x10", "NaN", "Infinity", "1,5"]) {
      const quoted = await refusal(`a,b,label\n1,"${bad}",0\n`);
      expect(quoted.message).toBe(`line 2, column "b": ${JSON.stringify(bad)} is not a number`);
    }
  });

  it("a number beyond float32", async () => {
    const error = await refusal("a,label\n1,0\n1e39,1\n");
    expect(error.message).toBe(
      'line 3, column "a": "1e39" is too large for a float32 (at most about 3.4e38)',
    );
  });

  it("a label column the header does not have", async () => {
    const error = await refusal("a,b,c\n1,2,3\n", { labelColumn: "target" });
    expect(error.message).toBe(
      'line 1: the header has no column "target" to take the label from; its columns are "a", "b", "c"',
    );
  });

  it("an empty file, or a header without rows", async () => {
    expect((await refusal("")).message).toBe(
      "the file is empty: its first line must be a header naming the columns",
    );
    expect((await refusal("\n\n  \n")).message).toBe(
      "the file is empty: its first line must be a header naming the columns",
    );
    expect((await refusal("a,b\n")).message).toBe("the file has a header but no data rows");
    expect((await refusal("a,b\n\n")).message).toBe("the file has a header but no data rows");
  });

  it("a label that is not a whole number after whole-number labels", async () => {
    const error = await refusal("x,label\n1,0\n2,1\n3,cat\n");
    expect(error.message).toBe(
      'line 4, column "label": "cat" is not a whole number; the label of the first data row (line 2) is a class id, so every label must be one',
    );
    const decimal = await refusal("x,label\n1,3\n2,1.5\n");
    expect(decimal.message).toMatch(/^line 3, column "label": "1\.5" is not a whole number/);
  });

  it("too many classes", async () => {
    const id = await refusal("x,label\n1,0\n2,65536\n");
    expect(id.message).toBe(
      'line 3, column "label": class id 65536 is too large; a dataset has at most 65536 classes (ids 0 to 65535)',
    );
    const rows = ["x,label"];
    for (let row = 0; row <= 65_536; row += 1) rows.push(`${row},c${row}`);
    const names = await refusal(rows.join("\n"));
    expect(names.message).toBe(
      'line 65538, column "label": "c65536" would be class 65537; a dataset has at most 65536 classes',
    );
  });

  it("a header that names a column twice, or none", async () => {
    expect((await refusal("a,b,a\n1,2,3\n")).message).toBe('line 1: the header names column "a" twice');
    expect((await refusal("a,,label\n1,2,3\n")).message).toBe("line 1: column 2 of the header has no name");
    expect((await refusal("label\n1\n")).message).toBe(
      "line 1: the header names only one column; a dataset needs at least one feature column and the label column",
    );
  });

  it("an empty class name, and lines counted across quoted line breaks", async () => {
    const error = await refusal('x,label\n1,"two\nlines"\n2,""\n');
    expect(error.message).toBe('line 4, column "label": the label is empty');
  });

  it("a record longer than the limit, such as an unclosed quote swallowing the file", async () => {
    const error = await refusal(`x,label\n1,0\n2,"${"y".repeat(MAX_RECORD_BYTES + 10)}\n`);
    expect(error.message).toBe(
      `line 3: a record runs past ${MAX_RECORD_BYTES} characters; look for a quote that is never closed`,
    );
  });

  it("a file that is not CSV", async () => {
    const error = await refusal('x,label\n1,0\n2,"open\n');
    expect(error.message).toMatch(/^line 3: the file is not valid CSV \(/);
  });
});
