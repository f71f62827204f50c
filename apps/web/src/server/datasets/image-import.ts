import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import sharp from "sharp";
import yauzl, { type Entry, type ZipFile } from "yauzl";
import { DATASET_FORMAT_VERSION, type DatasetShard, type ImageManifest } from "../../api/schemas/datasets.ts";
import { IMAGE_LIMITS } from "@barnraise/protocol";
import { summarizeSplits, writeManifestFile } from "./manifest.ts";
import { ShardWriter } from "./shard-writer.ts";
import type { ImportProgress } from "./uploaded-dataset.ts";

/**
 * Converts a zip archive of images, one folder per class (`cats/001.jpg`, `dogs/001.png`, …), into
 * an `image-u8` dataset. The archive is read with yauzl, which reads the zip's central directory
 * first and then each image on its own, so only the images being decoded are in memory, never
 * the archive. Each image is decoded and resized with sharp (libvips): EXIF orientation applied,
 * scaled to cover `width` × `height`, centred and cropped, alpha dropped, converted to grey or RGB.
 *
 * Rules (the datasets README has them for organizers):
 * - Images are the files ending in .jpg, .jpeg, .png, .webp, .gif, .tif, .tiff or .avif; other
 *   files, folders, and macOS metadata (`__MACOSX/`, names starting with a dot) are skipped.
 * - An image's class is the folder it is in. A folder shared by every image (`flowers/roses/…`,
 *   `flowers/tulips/…`) is not part of the class name. Classes are numbered in the order of their
 *   names. An image outside any class folder, fewer than two classes, or no image at all is refused.
 * - The order is deterministic and mixes the classes: images sorted by the SHA-256 of their path.
 *   In that order, every CSV_TEST_EVERY-th image of each class goes to the test split.
 * - A file that cannot be decoded, is larger than MAX_IMAGE_BYTES, or has more than
 *   MAX_IMAGE_PIXELS pixels fails the import with its path in the message.
 */

/** Every this-many-th image of a class goes to the test split. */
export const IMAGE_TEST_EVERY = 10;
/** Shards hold about this many bytes (whole records only). */
export const IMAGE_TARGET_SHARD_BYTES = 8 * 1024 * 1024;
/** The largest image file accepted, uncompressed in the archive. */
export const MAX_IMAGE_BYTES = 64 * 1024 * 1024;
/** The most pixels an image may have before it is resized (a decompression bomb has billions). */
export const MAX_IMAGE_PIXELS = 100_000_000;
/** The most images one archive may hold. */
export const MAX_IMAGES = 10_000_000;
/** Images decoded at once (sharp runs each on libvips's own threads). */
const CONCURRENT_DECODES = 4;
/** Progress is reported after this many images. */
const PROGRESS_EVERY_IMAGES = 64;

const IMAGE_EXTENSIONS = new Set([".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff", ".avif"]);
const MAX_CLASSES = 65_536;

export class ImageImportError extends Error {
  override readonly name = "ImageImportError";
  /** The archive member the problem is with, when it is with one. */
  readonly file: string | undefined;

  constructor(message: string, file?: string) {
    super(message);
    this.file = file;
  }
}

export interface ImageConversionOptions {
  /** The zip archive. */
  readonly source: string;
  /** An empty directory to write the shards and manifest into. */
  readonly dir: string;
  readonly name: string;
  /** The archive's original name, recorded in `createdFrom.upload`. */
  readonly fileName: string;
  readonly width: number;
  readonly height: number;
  readonly channels: 1 | 3;
  readonly recordsPerShard?: number;
  readonly onProgress?: (progress: ImportProgress) => void;
  readonly signal?: AbortSignal;
}

/** One image of the archive, with its class. */
interface ImageEntry {
  readonly entry: Entry;
  readonly path: string;
  readonly label: number;
  readonly split: "train" | "test";
}

/** Converts the archive into shards and a manifest in `options.dir`. Deterministic. */
export async function convertImageArchive(options: ImageConversionOptions): Promise<ImageManifest> {
  const { width, height, channels, signal } = options;
  checkImageSize(width, height, channels);
  signal?.throwIfAborted();
  const digest = await fileDigest(options.source, signal);
  let zip: ZipFile;
  try {
    zip = await yauzl.openPromise(options.source, {
      lazyEntries: true,
      autoClose: false,
      decodeStrings: true,
      validateEntrySizes: true,
      strictFileNames: false,
    });
  } catch (error) {
    throw new ImageImportError(`the file is not a zip archive (${errorText(error)})`);
  }
  try {
    const { images, classes } = planImages(await listEntries(zip));
    const pixels = width * height * channels;
    const recordBytes = pixels + 2;
    const recordsPerShard =
      options.recordsPerShard ?? Math.max(1, Math.floor(IMAGE_TARGET_SHARD_BYTES / recordBytes));
    const writers = {
      train: new ShardWriter({ dir: options.dir, split: "train", recordsPerShard }),
      test: new ShardWriter({ dir: options.dir, split: "test", recordsPerShard }),
    };
    let done = 0;
    let bytesRead = 0;
    try {
      await inOrder(
        images,
        CONCURRENT_DECODES,
        (image) => decodeImage(zip, image, { width, height, channels }, signal),
        async (image, record) => {
          await writers[image.split].write(record);
          done += 1;
          bytesRead += image.entry.compressedSize;
          if (done % PROGRESS_EVERY_IMAGES === 0) {
            options.onProgress?.({ bytesRead: Math.min(bytesRead, digest.bytes), records: done });
          }
        },
        signal,
      );
    } catch (error) {
      await Promise.all([writers.train.abort(), writers.test.abort()]);
      throw error;
    }
    const shards: DatasetShard[] = [...(await writers.train.finish()), ...(await writers.test.finish())];
    options.onProgress?.({ bytesRead: digest.bytes, records: done });
    const fileName = options.fileName.slice(0, 255) || "upload.zip";
    const manifest: ImageManifest = {
      name: options.name,
      formatVersion: DATASET_FORMAT_VERSION,
      format: "image-u8",
      description:
        `Imported from ${fileName}: ${images.length} images of ${classes.length} classes, ` +
        `${width}×${height} ${channels === 1 ? "grey" : "RGB"}`,
      createdFrom: { upload: fileName, bytes: digest.bytes, sha256: digest.sha256 },
      options: { recordsPerShard, testEvery: IMAGE_TEST_EVERY, fit: "cover" },
      splits: summarizeSplits(shards),
      shards,
      record: {
        bytes: recordBytes,
        image: { offset: 0, width, height, channels, dtype: "uint8", layout: "hwc" },
        label: { offset: pixels, dtype: "uint16le", classes },
      },
    };
    await writeManifestFile(options.dir, manifest);
    return manifest;
  } finally {
    zip.close();
  }
}

/** Refuses an image size the manifest cannot describe. */
export function checkImageSize(width: number, height: number, channels: number): void {
  const { minSide, maxSide } = IMAGE_LIMITS;
  for (const [what, side] of [
    ["width", width],
    ["height", height],
  ] as const) {
    if (!Number.isInteger(side) || side < minSide || side > maxSide) {
      throw new ImageImportError(
        `the image ${what} must be a whole number of pixels from ${minSide} to ${maxSide}`,
      );
    }
  }
  if (channels !== 1 && channels !== 3) {
    throw new ImageImportError("images have 1 channel (grey) or 3 (RGB)");
  }
}

/** Every file entry of the archive, from its central directory (no image is read yet). */
async function listEntries(zip: ZipFile): Promise<Entry[]> {
  const entries: Entry[] = [];
  await new Promise<void>((resolve, reject) => {
    zip.on("entry", (entry: Entry) => {
      if (!entry.fileName.endsWith("/")) entries.push(entry);
      if (entries.length > MAX_IMAGES) {
        reject(new ImageImportError(`the archive holds more than ${MAX_IMAGES} files`));
        return;
      }
      zip.readEntry();
    });
    zip.once("end", () => {
      resolve();
    });
    zip.once("error", (error: unknown) => {
      reject(new ImageImportError(`the zip archive is damaged (${errorText(error)})`));
    });
    zip.readEntry();
  });
  return entries;
}

/** The images to convert, in conversion order, with their class and split; and the class names. */
function planImages(entries: readonly Entry[]): { images: ImageEntry[]; classes: string[] } {
  const found: { entry: Entry; path: string; folder: string[] }[] = [];
  for (const entry of entries) {
    const path = entry.fileName.replaceAll("\\", "/");
    const segments = path.split("/").filter((segment) => segment !== "");
    if (segments.some((segment) => segment.startsWith(".") || segment === "__MACOSX")) continue;
    if (!IMAGE_EXTENSIONS.has(posix.extname(path).toLowerCase())) continue;
    if (entry.isEncrypted()) {
      throw new ImageImportError(`${path}: the file is encrypted; zip the images without a password`, path);
    }
    if (entry.uncompressedSize > MAX_IMAGE_BYTES) {
      throw new ImageImportError(
        `${path}: ${entry.uncompressedSize} bytes is larger than the ${MAX_IMAGE_BYTES / 1024 / 1024} MiB an image may be`,
        path,
      );
    }
    found.push({ entry, path, folder: segments.slice(0, -1) });
  }
  if (found.length === 0) {
    throw new ImageImportError(
      `the archive holds no images (files ending in ${[...IMAGE_EXTENSIONS].join(", ")})`,
    );
  }
  const loose = found.find((image) => image.folder.length === 0);
  if (loose !== undefined) {
    const all = found.every((image) => image.folder.length === 0);
    throw new ImageImportError(
      all
        ? "the archive has no class folders: put each class's images in a folder named after the class " +
            "(cats/001.jpg, dogs/001.jpg, …)"
        : `${loose.path} is not in a class folder; put every image in the folder of its class`,
      loose.path,
    );
  }
  const shared = sharedPrefix(found.map((image) => image.folder));
  const className = (folder: string[]) => folder.slice(shared).join("/");
  const names = [...new Set(found.map((image) => className(image.folder)))].sort();
  if (names.length < 2) {
    throw new ImageImportError(
      `the archive has one class folder (${names[0] ?? ""}); a classifier needs at least two, one folder for each class`,
    );
  }
  if (names.length > MAX_CLASSES) {
    throw new ImageImportError(
      `the archive has ${names.length} class folders; at most ${MAX_CLASSES} are supported`,
    );
  }
  const ids = new Map(names.map((name, id) => [name, id]));
  const ordered = found
    .map((image) => ({ ...image, key: createHash("sha256").update(image.path).digest("hex") }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const seen = new Array<number>(names.length).fill(0);
  const images = ordered.map(({ entry, path, folder }): ImageEntry => {
    const label = ids.get(className(folder)) ?? 0;
    seen[label] = (seen[label] ?? 0) + 1;
    const split = (seen[label] ?? 0) % IMAGE_TEST_EVERY === 0 ? "test" : "train";
    return { entry, path, label, split };
  });
  return { images, classes: names };
}

/**
 * How many leading folders every image shares and that are not a class: as many as all folders
 * have in common, leaving at least one folder (the class) for each image.
 */
function sharedPrefix(folders: readonly string[][]): number {
  const shortest = Math.min(...folders.map((folder) => folder.length));
  let shared = 0;
  const first = folders[0] ?? [];
  while (shared < shortest - 1 && folders.every((folder) => folder[shared] === first[shared])) shared += 1;
  return shared;
}

/** One image, decoded and resized: its record (the pixels, then the class id). */
async function decodeImage(
  zip: ZipFile,
  image: ImageEntry,
  size: { width: number; height: number; channels: 1 | 3 },
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  signal?.throwIfAborted();
  let bytes: Buffer;
  try {
    bytes = await readAll(await zip.openReadStreamPromise(image.entry));
  } catch (error) {
    throw new ImageImportError(
      `${image.path}: cannot be read from the archive (${errorText(error)})`,
      image.path,
    );
  }
  const pixels = size.width * size.height * size.channels;
  let raw: { data: Buffer; info: { width: number; height: number; channels: number } };
  try {
    let pipeline = sharp(bytes, { limitInputPixels: MAX_IMAGE_PIXELS, failOn: "error" })
      .autoOrient()
      .resize(size.width, size.height, { fit: "cover", position: "centre" })
      .removeAlpha();
    pipeline = size.channels === 1 ? pipeline.greyscale() : pipeline.toColourspace("srgb");
    raw = await pipeline.raw().toBuffer({ resolveWithObject: true });
  } catch (error) {
    throw new ImageImportError(
      `${image.path}: not an image that can be decoded (${errorText(error)})`,
      image.path,
    );
  }
  if (raw.info.channels !== size.channels || raw.data.byteLength !== pixels) {
    throw new ImageImportError(
      `${image.path}: decoded to ${raw.info.width}×${raw.info.height}×${raw.info.channels}, not ` +
        `${size.width}×${size.height}×${size.channels}`,
      image.path,
    );
  }
  const record = new Uint8Array(pixels + 2);
  record.set(raw.data, 0);
  new DataView(record.buffer).setUint16(pixels, image.label, true);
  return record;
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * Runs `work` on up to `concurrency` items at once and hands each result to `use` in the items'
 * order, one at a time. Rejects with the first failure (the others are left to settle).
 */
async function inOrder<T, R>(
  items: readonly T[],
  concurrency: number,
  work: (item: T) => Promise<R>,
  use: (item: T, result: R) => Promise<void>,
  signal: AbortSignal | undefined,
): Promise<void> {
  const pending: Promise<R>[] = [];
  let next = 0;
  const start = () => {
    const item = items[next];
    next += 1;
    if (item === undefined) return;
    const promise = work(item);
    // Handled when its turn comes; keep an early failure from being reported as unhandled.
    promise.catch(() => undefined);
    pending.push(promise);
  };
  while (pending.length < concurrency && next < items.length) start();
  for (const item of items) {
    signal?.throwIfAborted();
    const result = await (pending.shift() as Promise<R>);
    if (next < items.length) start();
    await use(item, result);
  }
}

/** The file's size and SHA-256, read once. */
async function fileDigest(
  path: string,
  signal: AbortSignal | undefined,
): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20, signal })) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).byteLength;
  }
  return { bytes, sha256: hash.digest("hex") };
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
