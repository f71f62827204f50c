import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { Readable } from "node:stream";
import type { UploadFile } from "../platform/platform-client.ts";

/**
 * The file at `path` to send to the platform. It is opened at sending, so a missing file fails there
 * (with its fs error) and not as a network failure; its size must be `sizeBytes`, the Content-Length
 * sent.
 */
export function uploadFileAt(path: string, sizeBytes: number, sha256: Uint8Array): UploadFile {
  return {
    sizeBytes,
    sha256,
    open: async () => {
      const handle = await open(path, "r");
      try {
        const { size } = await handle.stat();
        if (size !== sizeBytes)
          throw new RangeError(`${path} is ${size} bytes, not sizeBytes (${sizeBytes})`);
      } catch (error) {
        await handle.close();
        throw error;
      }
      const file = createReadStream("", { fd: handle });
      return {
        stream: Readable.toWeb(file) as ReadableStream<Uint8Array>,
        close: () => file.destroy(),
      };
    },
  };
}
