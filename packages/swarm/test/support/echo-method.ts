import { z } from "zod";
import { defineMethod, type Rpc } from "../../src/rpc/rpc.ts";

/** A test RPC: answers the text with the caller's username, as the signed request names it. */
export const echoMethod = defineMethod({
  name: "echo",
  request: z.strictObject({ text: z.string().max(100) }),
  response: z.strictObject({ text: z.string(), username: z.string() }),
  maxFrameBytes: 1 << 16,
});

/** A test RPC for bulk bytes: the callee streams `bytes` bytes (i mod 251) in frames of `frameBytes`. */
export const downloadMethod = defineMethod({
  name: "download",
  request: z.strictObject({
    bytes: z
      .number()
      .int()
      .min(0)
      .max(1 << 26),
    frameBytes: z.number().int().min(1),
  }),
  response: z.strictObject({ bytes: z.number() }),
  maxFrameBytes: 1 << 20,
});

/** Serves `downloadMethod` on `rpc`. */
export function serveDownloads(rpc: Rpc): void {
  rpc.handle(downloadMethod, async (incoming) => {
    const { bytes, frameBytes } = incoming.head;
    const stream = await incoming.respond({ bytes });
    for (let start = 0; start < bytes; start += frameBytes) {
      const frame = new Uint8Array(Math.min(frameBytes, bytes - start));
      for (let i = 0; i < frame.length; i++) frame[i] = (start + i) % 251;
      await stream.write(frame);
    }
    await stream.closeWrite();
  });
}

/** Downloads `bytes` bytes from `peer` and says how many came, and whether each was the one sent. */
export async function download(
  rpc: Rpc,
  peer: string,
  bytes: number,
  frameBytes = 256 << 10,
): Promise<{ bytes: number; intact: boolean }> {
  const { stream } = await rpc.call(peer, downloadMethod, { bytes, frameBytes });
  let received = 0;
  let intact = true;
  for (let frame = await stream.read(); frame !== null; frame = await stream.read()) {
    for (let i = 0; i < frame.length; i++) if (frame[i] !== (received + i) % 251) intact = false;
    received += frame.length;
  }
  await stream.closeWrite();
  return { bytes: received, intact };
}
