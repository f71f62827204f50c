import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { defineMethod, type PeerIdString, type Rpc, type RpcIncoming } from "../rpc/rpc.ts";

/**
 * The "link-probe" exchange, a speed test between two members (DeDLOC's volunteers measured their
 * links with one at start): the prober streams `uploadBytes` of zeros and closes its writing end;
 * the server, once it has read them all, streams `downloadBytes` back and closes. The prober times
 * its upload from its first frame to the first frame back (the server answers only after reading
 * everything), and its download from that frame to the end. Both sides are authenticated members
 * (the rpc layer checks passes); a server runs at most MAX_CONCURRENT_PROBES at once and refuses
 * more with BUSY, so probes cannot crowd out averaging on the aux.
 */

export const PROBE_FRAME_BYTES = 64 << 10;
/** Largest transfer a probe may ask for, each way. */
export const MAX_PROBE_BYTES = 16 << 20;
/** The default transfer each way: about 0.8 s at 10 Mbit/s, 80 ms at 100 Mbit/s. */
export const DEFAULT_PROBE_BYTES = 1 << 20;
const MAX_CONCURRENT_PROBES = 8;

export const linkProbeMethod = defineMethod({
  name: "link-probe",
  request: z.strictObject({
    uploadBytes: z.number().int().min(0).max(MAX_PROBE_BYTES),
    downloadBytes: z.number().int().min(0).max(MAX_PROBE_BYTES),
  }),
  response: z.strictObject({ ok: z.literal(true) }),
  maxFrameBytes: PROBE_FRAME_BYTES,
});

export interface LinkProbeResult {
  readonly peer: PeerIdString;
  readonly uploadBytes: number;
  readonly uploadSeconds: number;
  readonly downloadBytes: number;
  readonly downloadSeconds: number;
}

export interface LinkProbeOptions {
  readonly rpc: Rpc;
  /** Time limit of one probe, both ways; default 30 s. */
  readonly timeoutMs?: number;
  readonly now?: () => number;
}

export class LinkProbe {
  readonly #options: LinkProbeOptions;
  readonly #now: () => number;
  #serving = 0;
  #running = false;

  constructor(options: LinkProbeOptions) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Serves probes. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#options.rpc.handle(linkProbeMethod, (incoming) => this.#serve(incoming));
  }

  stop(): void {
    if (!this.#running) return;
    this.#running = false;
    this.#options.rpc.unhandle(linkProbeMethod);
  }

  /** Times a transfer of `bytes` each way with `peer`. Rejects with the exchange's SwarmError. */
  async probe(
    peer: PeerIdString,
    bytes = DEFAULT_PROBE_BYTES,
    signal?: AbortSignal,
  ): Promise<LinkProbeResult> {
    const timeoutMs = this.#options.timeoutMs ?? 30_000;
    const limit = AbortSignal.any([
      AbortSignal.timeout(timeoutMs),
      ...(signal === undefined ? [] : [signal]),
    ]);
    const { stream } = await this.#options.rpc.call(
      peer,
      linkProbeMethod,
      { uploadBytes: bytes, downloadBytes: bytes },
      { signal: limit, timeoutMs },
    );
    try {
      const frame = new Uint8Array(PROBE_FRAME_BYTES);
      const started = this.#now();
      for (let sent = 0; sent < bytes; sent += frame.length) {
        await stream.write(frame.subarray(0, Math.min(frame.length, bytes - sent)), { signal: limit });
      }
      await stream.closeWrite();
      let received = 0;
      let firstAt: number | undefined;
      for (;;) {
        const chunk = await stream.read({ signal: limit });
        if (chunk === null) break;
        firstAt ??= this.#now();
        received += chunk.length;
      }
      const endedAt = this.#now();
      if (received !== bytes || firstAt === undefined) {
        throw new SwarmError(
          SwarmErrorCode.PEER_UNREACHABLE,
          `${peer} sent ${received} of the ${bytes} probe bytes`,
          { peer },
        );
      }
      return {
        peer,
        uploadBytes: bytes,
        uploadSeconds: (firstAt - started) / 1000,
        // The first frame arrived at firstAt: the rest of the bytes took the time after it.
        downloadBytes: bytes - Math.min(bytes, PROBE_FRAME_BYTES),
        downloadSeconds: (endedAt - firstAt) / 1000,
      };
    } catch (error) {
      stream.abort(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  async #serve(
    incoming: RpcIncoming<{ uploadBytes: number; downloadBytes: number }, { ok: true }>,
  ): Promise<void> {
    if (this.#serving >= MAX_CONCURRENT_PROBES) {
      throw new SwarmError(SwarmErrorCode.BUSY, "busy with other probes; try again later");
    }
    this.#serving += 1;
    try {
      const stream = await incoming.respond({ ok: true });
      const signal = AbortSignal.any([
        incoming.signal,
        AbortSignal.timeout(this.#options.timeoutMs ?? 30_000),
      ]);
      const { uploadBytes, downloadBytes } = incoming.head;
      let received = 0;
      for (;;) {
        const chunk = await stream.read({ signal });
        if (chunk === null) break;
        received += chunk.length;
        if (received > uploadBytes) {
          stream.abort(new SwarmError(SwarmErrorCode.OVERSIZED_MESSAGE, "more probe bytes than announced"));
          return;
        }
      }
      const frame = new Uint8Array(PROBE_FRAME_BYTES);
      for (let sent = 0; sent < downloadBytes; sent += frame.length) {
        await stream.write(frame.subarray(0, Math.min(frame.length, downloadBytes - sent)), { signal });
      }
      await stream.closeWrite();
    } finally {
      this.#serving -= 1;
    }
  }
}
