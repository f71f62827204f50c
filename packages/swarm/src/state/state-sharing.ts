import type { Logger } from "pino";
import type { SwarmMetrics } from "../metrics/swarm-metrics.ts";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import type { PeerIdString, Rpc, RpcFrameStream, RpcIncoming } from "../rpc/rpc.ts";
import {
  MAX_STATE_CHUNKS,
  MAX_STATE_CHUNK_BYTES,
  stateChunksMethod,
  stateManifestMethod,
  type StateChunksRequest,
  type StateManifest,
  type StateManifestRequest,
} from "./state-messages.ts";
import {
  chunkLength,
  chunkRoot,
  createStateSnapshot,
  deserializeTrainingState,
  sameBytes,
  sha256,
  snapshotChunk,
  type StateSnapshot,
} from "./state-snapshot.ts";
import type { TrainingState } from "./training-state.ts";
import { toHex } from "@barnraise/protocol";

/**
 * State sharing (DESIGN §4): every peer serves its current training state to others, and a new
 * or stale peer downloads one from up-to-date donors — chunked, every chunk checked against the
 * donor's manifest, the work spread over all donors that offer the same snapshot, and a donor that
 * fails, stalls or lies dropped with its remaining chunks handed to the others.
 */

export interface StateSharingOptions {
  rpc: Rpc;
  /** Preferred chunk size; grown for states that would need more than MAX_STATE_CHUNKS chunks. Default 1 MiB. */
  chunkBytes?: number;
  /** The state this peer serves, or null while it has none. Read once per epoch. */
  getState: () => TrainingState | null;
  logger?: Logger;
  /** Snapshots kept so downloads in flight can finish after this peer moves on; default 2. */
  keepSnapshots?: number;
  /** How long a donor waits for a downloader to take the next chunk; default 30 s. */
  serveTimeoutMs?: number;
  /** Where downloads are counted. */
  metrics?: SwarmMetrics;
  /** Uniform numbers in [0, 1) that decide which donor serves which block; default Math.random. */
  random?: () => number;
}

export interface StateDownloadOptions {
  donors: readonly PeerIdString[];
  /** Oldest acceptable epoch. */
  minEpoch: number;
  /**
   * The run generation the state must belong to: donors of another generation refuse, and a
   * downloaded state of another generation is rejected. Any generation when left out.
   */
  generation?: number;
  signal?: AbortSignal;
  /** Longest wait for any one answer of a donor (manifest, response head, next chunk) before it is dropped; default 10 s. */
  timeoutMs?: number;
  /** Called after every verified chunk with the bytes verified so far and the state's size. */
  onProgress?: (bytes: number, totalBytes: number) => void;
}

const BLOCKS_PER_DONOR = 4;
const MAX_REASONS = 8;

interface Offer {
  readonly manifest: StateManifest;
  readonly donors: PeerIdString[];
}

interface RangeOutcome {
  readonly donor: PeerIdString;
  /** First chunk of the range not received. */
  readonly next: number;
  readonly to: number;
  readonly error?: string;
}

interface Download {
  readonly signal: AbortSignal;
  readonly timeoutMs: number;
  /** Donors dropped so far, with the reason. */
  readonly dropped: Map<PeerIdString, string>;
  readonly failures: string[];
  readonly onProgress: ((bytes: number, totalBytes: number) => void) | undefined;
}

export class StateSharing {
  readonly #rpc: Rpc;
  readonly #chunkBytes: number;
  readonly #getState: () => TrainingState | null;
  readonly #logger: Logger | undefined;
  readonly #keepSnapshots: number;
  readonly #serveTimeoutMs: number;
  /** Newest first. */
  #snapshots: StateSnapshot[] = [];
  #running: AbortController | null = null;
  #servedChunks = 0;

  readonly #metrics: SwarmMetrics | undefined;
  readonly #random: () => number;

  constructor(options: StateSharingOptions) {
    const chunkBytes = options.chunkBytes ?? 1 << 20;
    if (!Number.isSafeInteger(chunkBytes) || chunkBytes <= 0 || chunkBytes > MAX_STATE_CHUNK_BYTES) {
      throw new SwarmError(
        SwarmErrorCode.LENGTH_MISMATCH,
        `chunkBytes must be an integer in 1..${MAX_STATE_CHUNK_BYTES}, got ${chunkBytes}`,
      );
    }
    this.#rpc = options.rpc;
    this.#chunkBytes = chunkBytes;
    this.#getState = options.getState;
    this.#logger = options.logger;
    this.#metrics = options.metrics;
    this.#keepSnapshots = Math.max(1, options.keepSnapshots ?? 2);
    this.#serveTimeoutMs = options.serveTimeoutMs ?? 30_000;
    this.#random = options.random ?? Math.random;
  }

  /** Chunks this peer has sent to downloaders since it was created. */
  get servedChunks(): number {
    return this.#servedChunks;
  }

  /** Starts serving "state-manifest" and "state-chunks". */
  start(): void {
    if (this.#running !== null) return;
    this.#running = new AbortController();
    this.#rpc.handle(stateManifestMethod, (incoming) => this.#serveManifest(incoming));
    this.#rpc.handle(stateChunksMethod, (incoming) => this.#serveChunks(incoming));
  }

  /** Stops serving, drops the snapshots and aborts downloads in flight. */
  stop(): void {
    if (this.#running === null) return;
    this.#rpc.unhandle(stateManifestMethod);
    this.#rpc.unhandle(stateChunksMethod);
    this.#running.abort(new SwarmError(SwarmErrorCode.ABORTED, "state sharing stopped"));
    this.#running = null;
    this.#snapshots = [];
  }

  /**
   * The snapshot served for the current state, or null when there is none. Serialized once per
   * epoch (and generation): later changes to the state within the same epoch are not seen by
   * downloaders.
   */
  snapshot(): StateSnapshot | null {
    const state = this.#getState();
    if (state === null) return null;
    const latest = this.#snapshots[0];
    if (
      latest !== undefined &&
      latest.epoch === state.epoch &&
      latest.generation === (state.generation ?? 0) &&
      latest.samples === (state.samples ?? 0)
    ) {
      return latest;
    }
    const snapshot = createStateSnapshot(state, this.#chunkBytes, MAX_STATE_CHUNKS);
    if (snapshot.chunkBytes > MAX_STATE_CHUNK_BYTES) {
      throw new SwarmError(
        SwarmErrorCode.STATE_UNAVAILABLE,
        `state of ${snapshot.blob.length} bytes is larger than the ${MAX_STATE_CHUNKS * MAX_STATE_CHUNK_BYTES} bytes state sharing can carry`,
      );
    }
    this.#snapshots = [snapshot, ...this.#snapshots].slice(0, this.#keepSnapshots);
    return snapshot;
  }

  /** Downloads the newest state at or after `minEpoch` from `donors`; see the module comment. */
  async download(options: StateDownloadOptions): Promise<TrainingState> {
    const metrics = this.#metrics;
    if (metrics === undefined) return this.#download(options);
    try {
      const state = await this.#download(options);
      metrics.stateDownloads.inc({ outcome: "ok" });
      metrics.stateDownloadBytes.inc(stateBytes(state));
      return state;
    } catch (error) {
      metrics.stateDownloads.inc({ outcome: "failed" });
      throw error;
    }
  }

  async #download(options: StateDownloadOptions): Promise<TrainingState> {
    const running = this.#running;
    if (running === null) throw new SwarmError(SwarmErrorCode.NOT_RUNNING, "state sharing is not started");
    if (!Number.isSafeInteger(options.minEpoch) || options.minEpoch < 0) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `minEpoch must be a non-negative integer, got ${options.minEpoch}`,
      );
    }
    const { generation } = options;
    if (generation !== undefined && (!Number.isSafeInteger(generation) || generation < 0)) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `generation must be a non-negative integer, got ${generation}`,
      );
    }
    const done = new AbortController();
    const signals = [running.signal, done.signal, ...(options.signal === undefined ? [] : [options.signal])];
    const download: Download = {
      signal: AbortSignal.any(signals),
      timeoutMs: options.timeoutMs ?? 10_000,
      dropped: new Map(),
      failures: [],
      onProgress: options.onProgress,
    };
    try {
      const donors = [...new Set(options.donors)].filter((donor) => donor !== this.#rpc.peerId);
      const request =
        generation === undefined
          ? { minEpoch: options.minEpoch }
          : { minEpoch: options.minEpoch, generation };
      const offers = await this.#collectOffers(donors, request, download);
      for (const offer of offers) {
        throwIfAborted(download.signal);
        const live = offer.donors.filter((donor) => !download.dropped.has(donor));
        if (live.length === 0) continue;
        const blob = await this.#fetchBlob(offer.manifest, live, download);
        if (blob === null) continue;
        const state = this.#decode(blob, offer, generation, download);
        if (state !== null) return state;
      }
      const reasons = download.failures.slice(0, MAX_REASONS).join("; ");
      const more =
        download.failures.length > MAX_REASONS ? ` (and ${download.failures.length - MAX_REASONS} more)` : "";
      throw new SwarmError(
        SwarmErrorCode.STATE_UNAVAILABLE,
        `no donor out of ${donors.length} could serve state at or after epoch ${options.minEpoch}: ${reasons || "no donors given"}${more}`,
      );
    } finally {
      done.abort(new SwarmError(SwarmErrorCode.ABORTED, "download finished"));
    }
  }

  async #serveManifest(incoming: RpcIncoming<StateManifestRequest, StateManifest>): Promise<void> {
    const { minEpoch, generation } = incoming.head;
    const snapshot = this.snapshot();
    if (snapshot === null || snapshot.epoch < minEpoch) {
      const have = snapshot === null ? "no state" : `epoch ${snapshot.epoch}`;
      throw new SwarmError(
        SwarmErrorCode.STATE_UNAVAILABLE,
        `asked for epoch ${minEpoch} or later, have ${have}`,
      );
    }
    if (generation !== undefined && snapshot.generation !== generation) {
      throw new SwarmError(
        SwarmErrorCode.STATE_UNAVAILABLE,
        `asked for generation ${generation}, have generation ${snapshot.generation}`,
      );
    }
    const stream = await incoming.respond({
      epoch: snapshot.epoch,
      totalBytes: snapshot.blob.length,
      chunkBytes: snapshot.chunkBytes,
      root: snapshot.root,
      chunkHashes: [...snapshot.chunkHashes],
    });
    await stream.closeWrite();
  }

  async #serveChunks(incoming: RpcIncoming<StateChunksRequest, { ok: true }>): Promise<void> {
    const { epoch, root, fromChunk, toChunk } = incoming.head;
    const snapshot = this.#snapshots.find((kept) => kept.epoch === epoch && sameBytes(kept.root, root));
    if (snapshot === undefined) {
      throw new SwarmError(
        SwarmErrorCode.STATE_UNAVAILABLE,
        `no longer holds state ${toHex(root)} of epoch ${epoch}`,
      );
    }
    if (toChunk > snapshot.chunkHashes.length) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `chunks ${fromChunk}..${toChunk} run past the ${snapshot.chunkHashes.length} chunks of the snapshot`,
      );
    }
    const stopped = this.#running?.signal ?? AbortSignal.abort();
    const stream = await incoming.respond({ ok: true });
    try {
      for (let index = fromChunk; index < toChunk; index++) {
        const signal = AbortSignal.any([incoming.signal, stopped, AbortSignal.timeout(this.#serveTimeoutMs)]);
        await stream.write(snapshotChunk(snapshot, index), { signal });
        this.#servedChunks++;
      }
      await stream.closeWrite();
    } catch (error) {
      stream.abort(toError(error));
      this.#logger?.debug({ peer: incoming.from.peerId, err: error }, "stopped serving state chunks");
    }
  }

  /** Asks every donor for a manifest; returns the offers, best first (newest epoch, most donors). */
  async #collectOffers(
    donors: PeerIdString[],
    request: StateManifestRequest,
    download: Download,
  ): Promise<Offer[]> {
    const { minEpoch } = request;
    const offers = new Map<string, Offer>();
    await Promise.all(
      donors.map(async (donor) => {
        try {
          const manifest = await this.#rpc.request(
            donor,
            stateManifestMethod,
            request,
            callOptions(download),
          );
          if (manifest.epoch < minEpoch) {
            throw new Error(`offered epoch ${manifest.epoch}, below ${minEpoch}`);
          }
          if (!sameBytes(chunkRoot(manifest.chunkHashes), manifest.root)) {
            throw new Error("manifest root does not match its chunk hashes");
          }
          const key = `${manifest.epoch}/${manifest.totalBytes}/${manifest.chunkBytes}/${toHex(manifest.root)}`;
          const offer = offers.get(key) ?? { manifest, donors: [] };
          offer.donors.push(donor);
          offers.set(key, offer);
        } catch (error) {
          this.#drop(download, donor, `manifest: ${describe(error)}`);
        }
      }),
    );
    throwIfAborted(download.signal);
    return [...offers.entries()]
      .sort(
        ([keyA, a], [keyB, b]) =>
          b.manifest.epoch - a.manifest.epoch || b.donors.length - a.donors.length || (keyA < keyB ? -1 : 1),
      )
      .map(([, offer]) => offer);
  }

  /**
   * Fetches every chunk of `manifest`: blocks of contiguous chunks are pulled from a shared queue by
   * whichever donor is idle (so faster donors serve more); a failed donor's unfinished block goes
   * back to the queue. Returns null when every donor failed.
   *
   * The donors start in a random order. A state of fewer blocks than donors (a small model is one
   * chunk) is then served by a random few, so newcomers that arrive together spread over all the
   * donors instead of all taking the first block from the same one.
   */
  async #fetchBlob(
    manifest: StateManifest,
    donors: PeerIdString[],
    download: Download,
  ): Promise<Uint8Array | null> {
    const count = manifest.chunkHashes.length;
    const blob = new Uint8Array(manifest.totalBytes);
    const blockSize = Math.max(1, Math.ceil(count / (donors.length * BLOCKS_PER_DONOR)));
    const queue: Array<[number, number]> = [];
    for (let from = 0; from < count; from += blockSize) queue.push([from, Math.min(count, from + blockSize)]);
    const idle = shuffled(donors, this.#random);
    const inFlight = new Map<PeerIdString, Promise<RangeOutcome>>();
    let receivedBytes = 0;
    let receivedChunks = 0;
    const onChunk = (bytes: number): void => {
      receivedBytes += bytes;
      receivedChunks++;
      try {
        download.onProgress?.(receivedBytes, manifest.totalBytes);
      } catch (error) {
        this.#logger?.warn({ err: error }, "state download progress callback threw");
      }
    };
    while (receivedChunks < count) {
      while (idle.length > 0 && queue.length > 0) {
        const donor = idle.shift();
        const range = queue.shift();
        if (donor === undefined || range === undefined) break;
        inFlight.set(donor, this.#fetchRange(donor, manifest, range[0], range[1], blob, download, onChunk));
      }
      if (inFlight.size === 0) return null;
      const outcome = await Promise.race(inFlight.values());
      inFlight.delete(outcome.donor);
      throwIfAborted(download.signal);
      if (outcome.error === undefined) {
        idle.push(outcome.donor);
      } else {
        this.#drop(download, outcome.donor, `epoch ${manifest.epoch}: ${outcome.error}`);
        if (outcome.next < outcome.to) queue.unshift([outcome.next, outcome.to]);
      }
    }
    return blob;
  }

  /** Streams chunks `from`..`to` from one donor into `blob`, verifying each; never rejects. */
  async #fetchRange(
    donor: PeerIdString,
    manifest: StateManifest,
    from: number,
    to: number,
    blob: Uint8Array,
    download: Download,
    onChunk: (bytes: number) => void,
  ): Promise<RangeOutcome> {
    let next = from;
    let stream: RpcFrameStream | undefined;
    try {
      const request = { epoch: manifest.epoch, root: manifest.root, fromChunk: from, toChunk: to };
      stream = (await this.#rpc.call(donor, stateChunksMethod, request, callOptions(download))).stream;
      await stream.closeWrite();
      for (; next < to; next++) {
        const frame = await readWithin(stream, download);
        if (frame === null) throw new Error(`closed the stream after ${next - from} of ${to - from} chunks`);
        const expected = chunkLength(manifest.totalBytes, manifest.chunkBytes, next);
        if (frame.length !== expected) {
          throw new Error(`chunk ${next} is ${frame.length} bytes, expected ${expected}`);
        }
        const hash = manifest.chunkHashes[next];
        if (hash === undefined || !sameBytes(sha256(frame), hash)) {
          throw new Error(`chunk ${next} does not match its hash`);
        }
        blob.set(frame, next * manifest.chunkBytes);
        onChunk(frame.length);
      }
      if ((await readWithin(stream, download)) !== null)
        throw new Error(`sent more than the ${to - from} chunks asked for`);
      return { donor, next, to };
    } catch (error) {
      stream?.abort(toError(error));
      return { donor, next, to, error: describe(error) };
    }
  }

  /** Parses the assembled blob; a blob that every chunk hash vouches for but does not parse condemns its donors. */
  #decode(
    blob: Uint8Array,
    offer: Offer,
    generation: number | undefined,
    download: Download,
  ): TrainingState | null {
    try {
      const state = deserializeTrainingState(blob);
      if (state.epoch !== offer.manifest.epoch) {
        throw new Error(`holds epoch ${state.epoch}, its manifest says ${offer.manifest.epoch}`);
      }
      if (generation !== undefined && (state.generation ?? 0) !== generation) {
        throw new Error(`is of generation ${state.generation ?? 0}, not ${generation}`);
      }
      return state;
    } catch (error) {
      for (const donor of offer.donors)
        this.#drop(download, donor, `epoch ${offer.manifest.epoch}: state ${describe(error)}`);
      return null;
    }
  }

  #drop(download: Download, donor: PeerIdString, reason: string): void {
    if (download.dropped.has(donor)) return;
    download.dropped.set(donor, reason);
    download.failures.push(`${donor}: ${reason}`);
    this.#logger?.warn({ peer: donor, reason }, "dropping state donor");
  }
}

async function readWithin(stream: RpcFrameStream, download: Download): Promise<Uint8Array | null> {
  const timer = AbortSignal.timeout(download.timeoutMs);
  try {
    return await stream.read({ signal: AbortSignal.any([download.signal, timer]) });
  } catch (error) {
    if (timer.aborted && !download.signal.aborted) {
      throw new SwarmError(SwarmErrorCode.TIMEOUT, `stalled: no chunk within ${download.timeoutMs} ms`);
    }
    throw error;
  }
}

function callOptions(download: Download): { signal: AbortSignal; timeoutMs: number } {
  return { signal: download.signal, timeoutMs: download.timeoutMs };
}

function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted)
    throw new SwarmError(SwarmErrorCode.ABORTED, "state download aborted", { cause: signal.reason });
}

function describe(error: unknown): string {
  if (isSwarmError(error)) return `${error.remoteCode ?? error.code}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** The bytes a downloaded state holds: its parameters and optimizer slots, float32 each. */
function stateBytes(state: TrainingState): number {
  const slots = Object.values(state.optimizer.slots).reduce((sum, slot) => sum + slot.byteLength, 0);
  return state.parameters.byteLength + slots;
}

/** A copy of `items` in a uniformly random order (Fisher–Yates). */
function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy;
}
