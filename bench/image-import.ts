/**
 * Image archive import throughput and memory: a generated zip of JPEG photos in class folders,
 * converted into an `image-u8` dataset by the platform's converter (yauzl + sharp, streaming).
 *
 *   node bench/image-import.ts                     # 10,000 images of 320×240, resized to 32×32 RGB
 *   node bench/image-import.ts --images 2000 --side 64
 *   node bench/image-import.ts --dir /big/disk     # where the files go (default: the OS temp dir)
 *
 * The images are smooth colour gradients with noise (so JPEG cannot shrink them to nothing), in 10
 * class folders, stored in the zip without compression as zip tools store JPEGs. Prints the
 * archive's size, the conversion's MB/s (10^6 bytes of archive per second) and images/s, and how
 * much the resident memory grew while it ran (sampled every 20 ms), against the archive's size: the
 * converter holds one image per decoder at a time, never the archive. Everything is deleted at the end.
 */
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import sharp from "sharp";
import yazl from "yazl";
import { convertImageArchive } from "../apps/web/src/server/datasets/image-import.ts";

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const index = args.indexOf(name);
  return index >= 0 ? args[index + 1] : undefined;
};
const images = Number(option("--images") ?? 10_000);
const side = Number(option("--side") ?? 32);
if (!Number.isInteger(images) || images < 20) throw new Error("--images must be a whole number ≥ 20");
if (!Number.isInteger(side) || side < 4 || side > 1024) throw new Error("--side must be 4 … 1024");

const WIDTH = 320;
const HEIGHT = 240;
const CLASSES = 10;
const MB = 1e6;

/** A 320×240 JPEG: a gradient of class-dependent colour with per-pixel noise. */
async function photo(index: number): Promise<Buffer> {
  const pixels = Buffer.alloc(WIDTH * HEIGHT * 3);
  let state = (index * 2654435761) >>> 0;
  const hue = (index % CLASSES) * 25;
  for (let y = 0; y < HEIGHT; y++) {
    for (let x = 0; x < WIDTH; x++) {
      state = (state * 1664525 + 1013904223) >>> 0;
      const noise = (state >>> 24) - 128;
      const at = 3 * (y * WIDTH + x);
      pixels[at] = Math.max(0, Math.min(255, hue + x / 2 + noise / 4));
      pixels[at + 1] = Math.max(0, Math.min(255, y + noise / 4));
      pixels[at + 2] = Math.max(0, Math.min(255, 255 - hue - noise / 4));
    }
  }
  return await sharp(pixels, { raw: { width: WIDTH, height: HEIGHT, channels: 3 } })
    .jpeg({ quality: 85 })
    .toBuffer();
}

async function generateArchive(path: string): Promise<void> {
  const zip = new yazl.ZipFile();
  const done = new Promise<void>((resolve, reject) => {
    zip.outputStream.pipe(createWriteStream(path)).on("close", resolve).on("error", reject);
  });
  for (let i = 0; i < images; i++) {
    zip.addBuffer(await photo(i), `photos/class-${i % CLASSES}/${String(i).padStart(6, "0")}.jpg`, {
      compress: false,
      mtime: new Date(0),
    });
    if ((i + 1) % 1000 === 0) process.stderr.write(`  generated ${i + 1} images\n`);
  }
  zip.end();
  await done;
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(option("--dir") ?? tmpdir(), "barnraise-image-bench-"));
  try {
    const archive = join(dir, "photos.zip");
    console.log(`generating ${images} JPEG images of ${WIDTH}×${HEIGHT} in ${CLASSES} class folders…`);
    await generateArchive(archive);
    const bytes = (await stat(archive)).size;
    console.log(`archive: ${(bytes / MB).toFixed(1)} MB (${Math.round(bytes / images / 1000)} kB an image)`);

    const out = join(dir, "dataset");
    await mkdir(out);
    const startRss = process.memoryUsage().rss;
    let peak = startRss;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 20);
    const start = performance.now();
    const manifest = await convertImageArchive({
      source: archive,
      dir: out,
      name: "photos",
      fileName: "photos.zip",
      width: side,
      height: side,
      channels: 3,
    });
    const seconds = (performance.now() - start) / 1000;
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);
    const records = manifest.splits.train.records + manifest.splits.test.records;
    console.log(
      `conversion to ${side}×${side} RGB on ${cpus().length} cores: ${seconds.toFixed(1)} s, ` +
        `${(bytes / MB / seconds).toFixed(1)} MB/s, ${Math.round(records / seconds)} images/s`,
    );
    // The process already holds what generating the archive left behind: the growth is the converter's.
    console.log(
      `memory: RSS grew by ${((peak - startRss) / 2 ** 20).toFixed(0)} MiB during the conversion ` +
        `(peak ${(peak / 2 ** 20).toFixed(0)} MiB) for a ${(bytes / 2 ** 20).toFixed(0)} MiB archive`,
    );
    console.log(
      `records: ${records} (${manifest.splits.train.records} train / ${manifest.splits.test.records} test)`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
