/**
 * Reading HTTP bodies of a known size: the dataset's shards and an uploaded model's files, whose
 * sizes come from a manifest the peer already checked.
 */

/** An HTTP status worth retrying (5xx, 408, 429): the server may recover. */
export class TransientStatus extends Error {
  override readonly name = "TransientStatus";
}

/** True for the statuses `TransientStatus` stands for. */
export function isTransientStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 429;
}

/**
 * Reads a response body into one buffer, refusing more than `limit` bytes. Sizes come from the
 * manifest, not Content-Length (Next.js drops that header). The result starts at byte offset 0,
 * so it can back aligned typed-array views.
 */
export async function readBody(
  response: Response,
  limit: number,
  tooLong: () => Error,
): Promise<Uint8Array<ArrayBuffer>> {
  const body = response.body;
  if (body === null) return new Uint8Array(0);
  const reader = body.getReader();
  let buffer = new Uint8Array(Math.min(limit, 1 << 20));
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (length + value.byteLength > limit) {
      await reader.cancel();
      throw tooLong();
    }
    if (length + value.byteLength > buffer.byteLength) {
      const grown = new Uint8Array(
        Math.min(limit, Math.max(buffer.byteLength * 2, length + value.byteLength)),
      );
      grown.set(buffer.subarray(0, length));
      buffer = grown;
    }
    buffer.set(value, length);
    length += value.byteLength;
  }
  return length === buffer.byteLength ? buffer : buffer.slice(0, length);
}
