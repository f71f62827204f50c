import { Uint8ArrayList } from "uint8arraylist";

/**
 * A response body's bytes, or undefined when it is longer than `maxBytes`: a declared length over
 * the limit is refused before reading, and a body that runs past it is cancelled without buffering
 * the rest. Rejects when the stream breaks.
 */
export async function readBoundedBytes(
  response: Response,
  maxBytes: number,
): Promise<Uint8Array | undefined> {
  const declared = Number(response.headers.get("content-length") ?? "0");
  if (declared > maxBytes) {
    await response.body?.cancel();
    return undefined;
  }
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const chunks = new Uint8ArrayList();
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      return undefined;
    }
    chunks.append(value);
  }
  return chunks.subarray();
}

/** The body as UTF-8, bounded as `readBoundedBytes`. */
export async function readBoundedText(response: Response, maxBytes: number): Promise<string | undefined> {
  const bytes = await readBoundedBytes(response, maxBytes);
  return bytes === undefined ? undefined : new TextDecoder("utf-8").decode(bytes);
}
