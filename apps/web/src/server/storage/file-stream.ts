import type { FileHandle } from "node:fs/promises";

/** The most bytes a file stream reads per pull. */
export const CHUNK_BYTES = 64 * 1024;

/**
 * Bytes `start…end` (inclusive) of an open file as a web stream, read on demand (one chunk per pull,
 * so a slow client holds at most a chunk or two in memory). The stream owns the handle and closes it
 * at the end, on error and on cancel. Not `Readable.toWeb(createReadStream())`: in Node 24 that
 * adapter throws an uncaught ERR_INVALID_STATE, which kills the process, when the client goes away
 * while the stream waits on backpressure (nodejs/node#64529).
 */
export function fileStream(handle: FileHandle, start: number, end: number): ReadableStream<Uint8Array> {
  let position = start;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close();
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          if (position > end) {
            await close();
            controller.close();
            return;
          }
          const want = Math.min(CHUNK_BYTES, end + 1 - position);
          const { bytesRead, buffer } = await handle.read(new Uint8Array(want), 0, want, position);
          if (closed) return; // cancelled while reading
          if (bytesRead === 0) throw new Error(`the file ended at byte ${position}, before byte ${end}`);
          position += bytesRead;
          controller.enqueue(buffer.subarray(0, bytesRead));
          if (position > end) {
            await close();
            controller.close();
          }
        } catch (error) {
          await close();
          controller.error(error);
        }
      },
      async cancel() {
        await close();
      },
    },
    { highWaterMark: 1 },
  );
}
