import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import sharp from "sharp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { datasetManifestSchema, type ImageManifest } from "../src/api/schemas/datasets.ts";
import {
  convertImageArchive,
  ImageImportError,
  MAX_IMAGE_BYTES,
  type ImageConversionOptions,
} from "../src/server/datasets/image-import.ts";
import { solidImage, writeZip } from "./support/image-archive.ts";

/**
 * Zip archives of class folders → `image-u8`: records checked pixel by pixel (solid colours survive
 * any resize), classes from the folder names, the per-class test split, and every refusal with its
 * own message naming the archive member.
 */

let dir: string;
let counter = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "image-import-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const RED = [220, 20, 30] as const;
const BLUE = [10, 40, 200] as const;

async function archive(files: Iterable<readonly [string, Buffer]>): Promise<string> {
  counter += 1;
  const path = join(dir, `archive-${counter}.zip`);
  await writeZip(path, files);
  return path;
}

type Options = Partial<Omit<ImageConversionOptions, "source" | "dir">>;

async function convert(source: string, options: Options = {}) {
  counter += 1;
  const out = join(dir, `out-${counter}`);
  await mkdir(out);
  const manifest = await convertImageArchive({
    source,
    dir: out,
    name: "pictures",
    fileName: "pictures.zip",
    width: 8,
    height: 6,
    channels: 3,
    ...options,
  });
  return { manifest, out };
}

async function refusal(source: string, options: Options = {}): Promise<ImageImportError> {
  const error = await convert(source, options).then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(ImageImportError);
  return error as ImageImportError;
}

/** Every record of a split: its pixels and label. */
async function records(out: string, manifest: ImageManifest, split: "train" | "test") {
  const rows: { pixels: Uint8Array; label: number }[] = [];
  const { bytes, label } = manifest.record;
  for (const shard of manifest.shards.filter((entry) => entry.split === split)) {
    const data = await readFile(join(out, shard.file));
    expect(createHash("sha256").update(data).digest("hex")).toBe(shard.sha256);
    for (let start = 0; start < data.byteLength; start += bytes) {
      rows.push({
        pixels: data.subarray(start, start + label.offset),
        label: data.readUInt16LE(start + label.offset),
      });
    }
  }
  return rows;
}

describe("image archive import", () => {
  it("converts class folders into resized records with labels, split per class", async () => {
    const files: [string, Buffer][] = [];
    for (let i = 0; i < 20; i++) files.push([`flowers/roses/${i}.png`, await solidImage(40, 30, RED)]);
    for (let i = 0; i < 10; i++)
      files.push([`flowers/tulips/${i}.jpg`, await solidImage(17, 50, BLUE, "jpeg")]);
    files.push(["flowers/README.txt", Buffer.from("not an image")]);
    files.push(["__MACOSX/flowers/roses/._0.png", Buffer.from("resource fork")]);
    files.push(["flowers/.DS_Store", Buffer.from("finder")]);
    const source = await archive(files);
    const progress: number[] = [];
    const { manifest, out } = await convert(source, {
      recordsPerShard: 7,
      onProgress: ({ records: done }) => progress.push(done),
    });

    expect(datasetManifestSchema.parse(manifest)).toEqual(manifest);
    expect(manifest.format).toBe("image-u8");
    expect(manifest.record).toEqual({
      bytes: 8 * 6 * 3 + 2,
      image: { offset: 0, width: 8, height: 6, channels: 3, dtype: "uint8", layout: "hwc" },
      label: { offset: 8 * 6 * 3, dtype: "uint16le", classes: ["roses", "tulips"] },
    });
    expect(manifest.createdFrom).toEqual({
      upload: "pictures.zip",
      bytes: (await readFile(source)).byteLength,
      sha256: createHash("sha256")
        .update(await readFile(source))
        .digest("hex"),
    });
    // Every IMAGE_TEST_EVERY-th image of each class: 2 roses and 1 tulip.
    expect(manifest.splits.train.records).toBe(27);
    expect(manifest.splits.test.records).toBe(3);
    expect(manifest.shards.filter((shard) => shard.split === "train").map((shard) => shard.records)).toEqual([
      7, 7, 7, 6,
    ]);
    expect(progress.at(-1)).toBe(30);

    const train = await records(out, manifest, "train");
    const test = await records(out, manifest, "test");
    for (const { pixels, label } of [...train, ...test]) {
      const colour = label === 0 ? RED : BLUE;
      expect(pixels.byteLength).toBe(144);
      for (let p = 0; p < pixels.byteLength; p += 3) {
        // JPEG is lossy: within a few levels of the colour drawn.
        for (let c = 0; c < 3; c++) expect(Math.abs((pixels[p + c] ?? 0) - (colour[c] ?? 0))).toBeLessThan(8);
      }
    }
    expect(test.map((row) => row.label).sort()).toEqual([0, 0, 1]);
    // The classes are mixed, not one folder after the other.
    const labels = train.map((row) => row.label);
    const runs = labels.filter((label, i) => i > 0 && label !== labels[i - 1]).length;
    expect(runs).toBeGreaterThan(4);
  });

  it("resizes to cover and crops the centre, and converts to grey", async () => {
    // 20×10: a red left half and a blue right half. Cropped to a square, the centre keeps both.
    const half = await sharp({
      create: { width: 10, height: 10, channels: 3, background: { r: 255, g: 0, b: 0 } },
    })
      .extend({ right: 10, background: { r: 0, g: 0, b: 255 } })
      .png()
      .toBuffer();
    const white = await solidImage(5, 5, [255, 255, 255]);
    const source = await archive([
      ["a/half.png", half],
      ["b/white.png", white],
    ]);
    const { manifest, out } = await convert(source, { width: 4, height: 4, channels: 1 });
    expect(manifest.record.image.channels).toBe(1);
    const [first, second] = await records(out, manifest, "train").then((rows) =>
      rows.sort((x, y) => x.label - y.label),
    );
    // Grey of pure red and pure blue (Rec. 709 weights, as libvips uses): red is brighter.
    const row = [...(first?.pixels.subarray(0, 4) ?? [])];
    expect(row[0]).toBeGreaterThan((row[3] ?? 0) + 20);
    expect([...(second?.pixels ?? [])]).toEqual(new Array(16).fill(255));
  });

  it("is deterministic: the same archive gives the same shards", async () => {
    const files: [string, Buffer][] = [];
    for (let i = 0; i < 6; i++) files.push([`x/${i}.png`, await solidImage(5, 5, [i * 30, 0, 0])]);
    for (let i = 0; i < 6; i++) files.push([`y/${i}.png`, await solidImage(5, 5, [0, i * 30, 0])]);
    const source = await archive(files);
    const one = await convert(source);
    const two = await convert(source);
    expect(two.manifest.shards).toEqual(one.manifest.shards);
  });

  describe("refusals", () => {
    it("an archive with no class folders", async () => {
      const source = await archive([
        ["1.png", await solidImage(4, 4, RED)],
        ["2.png", await solidImage(4, 4, BLUE)],
      ]);
      expect((await refusal(source)).message).toBe(
        "the archive has no class folders: put each class's images in a folder named after the class " +
          "(cats/001.jpg, dogs/001.jpg, …)",
      );
    });

    it("an image outside the class folders", async () => {
      const source = await archive([
        ["cats/1.png", await solidImage(4, 4, RED)],
        ["dogs/1.png", await solidImage(4, 4, BLUE)],
        ["stray.png", await solidImage(4, 4, BLUE)],
      ]);
      const error = await refusal(source);
      expect(error.message).toBe(
        "stray.png is not in a class folder; put every image in the folder of its class",
      );
      expect(error.file).toBe("stray.png");
    });

    it("a single class", async () => {
      const source = await archive([
        ["data/cats/1.png", await solidImage(4, 4, RED)],
        ["data/cats/2.png", await solidImage(4, 4, RED)],
      ]);
      expect((await refusal(source)).message).toBe(
        "the archive has one class folder (cats); a classifier needs at least two, one folder for each class",
      );
    });

    it("no images at all", async () => {
      const source = await archive([["notes/readme.txt", Buffer.from("hello")]]);
      expect((await refusal(source)).message).toBe(
        "the archive holds no images (files ending in .jpg, .jpeg, .png, .webp, .gif, .tif, .tiff, .avif)",
      );
    });

    it("a file that is not an image, naming it", async () => {
      const source = await archive([
        ["cats/1.png", await solidImage(4, 4, RED)],
        ["dogs/broken.jpg", Buffer.from("this is not a JPEG")],
      ]);
      const error = await refusal(source);
      expect(error.message).toMatch(/^dogs\/broken\.jpg: not an image that can be decoded \(.+\)$/);
      expect(error.file).toBe("dogs/broken.jpg");
    });

    it("a truncated image, naming it", async () => {
      const whole = await solidImage(64, 64, RED, "jpeg");
      const source = await archive([
        ["cats/1.png", await solidImage(4, 4, RED)],
        ["dogs/cut.jpg", whole.subarray(0, Math.floor(whole.byteLength / 2))],
      ]);
      expect((await refusal(source)).message).toMatch(/^dogs\/cut\.jpg: not an image that can be decoded/);
    });

    it("a file that is not a zip archive", async () => {
      counter += 1;
      const source = join(dir, `not-zip-${counter}.zip`);
      await writeFile(source, "name,label\n1,2\n");
      expect((await refusal(source)).message).toMatch(/^the file is not a zip archive \(.+\)$/);
    });

    it("an image size out of range", async () => {
      const source = await archive([
        ["a/1.png", await solidImage(4, 4, RED)],
        ["b/1.png", await solidImage(4, 4, BLUE)],
      ]);
      expect((await refusal(source, { width: 2 })).message).toBe(
        "the image width must be a whole number of pixels from 4 to 1024",
      );
      expect((await refusal(source, { height: 5000 })).message).toBe(
        "the image height must be a whole number of pixels from 4 to 1024",
      );
    });

    it("an image too large to decode (a decompression bomb)", async () => {
      // 12,000 × 9,000 pixels of one colour: a small PNG, over the pixel limit once decoded.
      const bomb = await sharp({ create: { width: 12_000, height: 9_000, channels: 3, background: "#000" } })
        .png({ compressionLevel: 9 })
        .toBuffer();
      expect(bomb.byteLength).toBeLessThan(MAX_IMAGE_BYTES);
      const source = await archive([
        ["a/1.png", await solidImage(4, 4, RED)],
        ["b/bomb.png", bomb],
      ]);
      expect((await refusal(source)).message).toMatch(
        /^b\/bomb\.png: not an image that can be decoded \(.*pixel/i,
      );
    });
  });

  it("writes nothing but its own files into the directory", async () => {
    const source = await archive([
      ["a/1.png", await solidImage(4, 4, RED)],
      ["b/1.png", await solidImage(4, 4, BLUE)],
    ]);
    const { out } = await convert(source);
    expect((await readdir(out)).sort()).toEqual(["manifest.json", "train-00000.bin"]);
  });
});
