import { createWriteStream } from "node:fs";
import sharp from "sharp";
import yazl from "yazl";

/** A `width` × `height` image of one colour, encoded as `format`. */
export async function solidImage(
  width: number,
  height: number,
  rgb: readonly [number, number, number],
  format: "png" | "jpeg" | "webp" = "png",
): Promise<Buffer> {
  const [r, g, b] = rgb;
  return await sharp({ create: { width, height, channels: 3, background: { r, g, b } } })
    .toFormat(format)
    .toBuffer();
}

/** Writes a zip archive holding `files` (path → bytes) to `path`, compressed as zip tools do. */
export async function writeZip(path: string, files: Iterable<readonly [string, Buffer]>): Promise<void> {
  const zip = new yazl.ZipFile();
  for (const [name, bytes] of files) zip.addBuffer(bytes, name, { mtime: new Date(0) });
  zip.end();
  await new Promise<void>((resolve, reject) => {
    const out = createWriteStream(path);
    zip.outputStream.pipe(out).on("close", resolve).on("error", reject);
  });
}
