import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { Readable } from "node:stream";
import { signRequest, type KeyPair } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { readBoundedText } from "@barnraise/swarm";
import { z } from "zod";

/**
 * The aux peer's side of the platform routes it calls with DeDLOC I.5 signed requests
 * (`Authorization: Barnraise <signed request>`): register its address, post aggregated metrics,
 * upload a checkpoint. Each request is signed for its exact method, path and query, addressed to
 * the experiment's authority key, carries the node's current aux pass, the time, a fresh nonce and
 * the body's SHA-256. Every failure is a PlatformRequestError that says whether trying again can help.
 */

export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** An upload may take this many times the per-request timeout. */
export const UPLOAD_TIMEOUT_FACTOR = 10;
/** Answers larger than this are refused (the platform's answers to these routes are under 1 KiB). */
export const MAX_RESPONSE_BYTES = 64 * 1024;

export interface AuxPlatformClientOptions {
  /** The platform's base URL; a path prefix is kept (https://host/barnraise/ → …/barnraise/api/v1/…). */
  server: URL;
  experimentId: string;
  /** The node's identity: the key its aux pass was issued for. */
  keyPair: KeyPair;
  /** The experiment's authority key (from the verified join): every request is addressed to it. */
  authorityPublicKey: Uint8Array;
  /** The node's current aux pass token, read for every request (the pass is refreshed while running). */
  pass: () => string;
  fetch?: typeof fetch;
  /** Per request, answer included; uploads get UPLOAD_TIMEOUT_FACTOR times as long. */
  timeoutMs?: number;
  /** The clock the signed time is taken from, Unix milliseconds. */
  now?: () => number;
}

/** The client's own codes, besides the platform's (`{ error: { code } }`, e.g. FORBIDDEN). */
export const PlatformClientErrorCode = {
  /** No answer: connection refused or reset, DNS failure. */
  NETWORK: "NETWORK",
  /** No complete answer within the timeout. */
  TIMEOUT: "TIMEOUT",
  /** An answer that is not what the route returns: not JSON, too large, wrong shape, a redirect. */
  BAD_RESPONSE: "BAD_RESPONSE",
} as const;
export type PlatformClientErrorCode = (typeof PlatformClientErrorCode)[keyof typeof PlatformClientErrorCode];

/** A failed platform request. Branch on `code`; `retryable` says whether the same call may succeed later. */
export class PlatformRequestError extends Error {
  override readonly name = "PlatformRequestError";
  /** The HTTP status, or undefined when no complete answer came (NETWORK, TIMEOUT). */
  readonly status: number | undefined;
  /** The platform's error code, or one of PlatformClientErrorCode. */
  readonly code: string;
  /** True for network failures, timeouts, 429 and 5xx. */
  readonly retryable: boolean;

  constructor(code: string, message: string, options: { status?: number | undefined; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
    this.retryable =
      code === PlatformClientErrorCode.NETWORK ||
      code === PlatformClientErrorCode.TIMEOUT ||
      options.status === 429 ||
      (options.status !== undefined && options.status >= 500);
  }
}

export function isPlatformRequestError(error: unknown, code?: string): error is PlatformRequestError {
  return error instanceof PlatformRequestError && (code === undefined || error.code === code);
}

/** One aggregated collaborative step, as `POST …/metrics` takes it. */
export interface MetricsReportBody {
  readonly step: number;
  readonly loss: number;
  readonly samplesPerSecond: number;
  readonly alivePeers: number;
  /** When the step was aggregated, Unix milliseconds. */
  readonly time: number;
  /** Each peer's cumulative contribution. */
  readonly peers: readonly {
    readonly peerId: string;
    readonly samples: number;
    readonly computeSeconds: number;
    readonly bytesAggregated: number;
    readonly sessionSeconds: number;
  }[];
}

/** A checkpoint the platform stored. */
export interface UploadedCheckpoint {
  readonly id: string;
  readonly step: number;
  readonly loss: number | null;
  readonly sizeBytes: number;
  /** SHA-256 of the file, lowercase hex. */
  readonly sha256: string;
  /** ISO 8601. */
  readonly createdAt: string;
  /** The download path on the platform, e.g. `/api/v1/experiments/demo/checkpoints/cm0abc`. */
  readonly downloadUrl: string;
}

export interface CheckpointFile {
  readonly path: string;
  readonly sizeBytes: number;
  /** The file's SHA-256 (32 bytes): the signed body digest. */
  readonly sha256: Uint8Array;
}

export interface CheckpointMeta {
  readonly step: number;
  readonly loss?: number;
}

// Unknown extra fields are ignored, so a newer platform stays compatible.
const count = z.number().int().nonnegative();
const okSchema = z.object({ ok: z.literal(true) });
const metricsIngestedSchema = z.object({ ok: z.literal(true), unknownPeers: count });
const checkpointSchema = z.object({
  id: z.string().min(1).max(256),
  step: count,
  loss: z.number().nullable(),
  sizeBytes: count,
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  createdAt: z.string().max(64),
  downloadUrl: z.string().min(1).max(2048),
});
const errorBodySchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

type RequestBody =
  | { readonly kind: "json"; readonly bytes: Uint8Array<ArrayBuffer> }
  | { readonly kind: "file"; readonly file: CheckpointFile };

export class AuxPlatformClient {
  readonly #options: AuxPlatformClientOptions;
  readonly #base: URL;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;
  readonly #now: () => number;

  constructor(options: AuxPlatformClientOptions) {
    if (options.server.protocol !== "http:" && options.server.protocol !== "https:") {
      throw new TypeError(`the server must be an http:// or https:// URL, not ${options.server.protocol}`);
    }
    if (options.experimentId === "") throw new TypeError("experimentId must not be empty");
    this.#options = options;
    this.#base = baseUrl(options.server);
    this.#fetch = options.fetch ?? fetch;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.#now = options.now ?? Date.now;
  }

  /** Tells the platform where other peers can dial this node; each multiaddr ends with /p2p/<its PeerId>. */
  async registerAddress(multiaddrs: readonly string[], signal?: AbortSignal): Promise<void> {
    await this.#call("peers/address", undefined, jsonBody({ multiaddrs }), okSchema, signal);
  }

  /** Posts one aggregated step; `unknownPeers` counts reported peers the platform does not know. */
  async postMetrics(report: MetricsReportBody, signal?: AbortSignal): Promise<{ unknownPeers: number }> {
    const answer = await this.#call("metrics", undefined, jsonBody(report), metricsIngestedSchema, signal);
    return { unknownPeers: answer.unknownPeers };
  }

  /**
   * Streams the file at `file.path` to the platform. `sizeBytes` and `sha256` must describe the
   * file: the platform keeps it only if it has exactly that size and hash (SIZE_MISMATCH,
   * CHECKSUM_MISMATCH otherwise). The file's size is checked before anything is sent.
   */
  async uploadCheckpoint(
    file: CheckpointFile,
    meta: CheckpointMeta,
    signal?: AbortSignal,
  ): Promise<UploadedCheckpoint> {
    if (!Number.isSafeInteger(meta.step) || meta.step < 0) {
      throw new RangeError(`step must be a non-negative integer, not ${meta.step}`);
    }
    if (meta.loss !== undefined && !Number.isFinite(meta.loss)) {
      throw new RangeError(`loss must be a finite number, not ${meta.loss}`);
    }
    if (!Number.isSafeInteger(file.sizeBytes) || file.sizeBytes < 1) {
      throw new RangeError(`sizeBytes must be a positive integer, not ${file.sizeBytes}`);
    }
    const query = new URLSearchParams({ step: String(meta.step) });
    if (meta.loss !== undefined) query.set("loss", String(meta.loss));
    query.set("sizeBytes", String(file.sizeBytes));
    const stored = await this.#call("checkpoints", query, { kind: "file", file }, checkpointSchema, signal);
    const sha256 = Buffer.from(file.sha256).toString("hex");
    if (stored.sha256 !== sha256 || stored.sizeBytes !== file.sizeBytes || stored.step !== meta.step) {
      throw new PlatformRequestError(
        PlatformClientErrorCode.BAD_RESPONSE,
        `the platform recorded another checkpoint than the one sent (step ${stored.step}, ` +
          `${stored.sizeBytes} bytes, sha256 ${stored.sha256})`,
        { status: 201 },
      );
    }
    return stored;
  }

  async #call<S extends z.ZodType>(
    route: string,
    query: URLSearchParams | undefined,
    body: RequestBody,
    schema: S,
    signal: AbortSignal | undefined,
  ): Promise<z.output<S>> {
    signal?.throwIfAborted();
    const url = new URL(
      `api/v1/experiments/${encodeURIComponent(this.#options.experimentId)}/${route}`,
      this.#base,
    );
    if (query !== undefined) url.search = query.toString();
    const authorization = signRequest(nodeCrypto, this.#options.keyPair, {
      pass: this.#options.pass(),
      recipientPublicKey: this.#options.authorityPublicKey,
      scope: `POST ${url.pathname}${url.search}`,
      body: body.kind === "json" ? body.bytes : { sha256: body.file.sha256 },
      time: this.#now(),
    });
    const timeoutMs = body.kind === "file" ? this.#timeoutMs * UPLOAD_TIMEOUT_FACTOR : this.#timeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal === undefined ? timeout : AbortSignal.any([signal, timeout]);
    const headers: Record<string, string> = {
      accept: "application/json",
      authorization: `Barnraise ${authorization}`,
    };

    // `duplex` is what Node's fetch needs to send a stream; not every RequestInit typing has it.
    let init: RequestInit & { duplex?: "half" };
    let file: Readable | undefined;
    if (body.kind === "json") {
      headers["content-type"] = "application/json";
      init = { body: body.bytes };
    } else {
      headers["content-type"] = "application/octet-stream";
      headers["content-length"] = String(body.file.sizeBytes);
      file = await openFile(body.file);
      init = { body: Readable.toWeb(file) as ReadableStream<Uint8Array>, duplex: "half" };
    }

    try {
      const response = await this.#fetch(url, {
        ...init,
        method: "POST",
        headers,
        // The signature is bound to this URL: a redirect could only be refused, or send the pass elsewhere.
        redirect: "manual",
        signal: combined,
      });
      const text = await readBounded(response);
      return parseAnswer(response.status, text, schema, url);
    } catch (error) {
      if (error instanceof PlatformRequestError) throw error;
      signal?.throwIfAborted();
      if (timeout.aborted) {
        throw new PlatformRequestError(
          PlatformClientErrorCode.TIMEOUT,
          `the platform at ${url.origin} did not answer within ${timeoutMs} ms`,
          { cause: error },
        );
      }
      throw new PlatformRequestError(
        PlatformClientErrorCode.NETWORK,
        `cannot reach the platform at ${url.origin} (${describeNetworkError(error)})`,
        { cause: error },
      );
    } finally {
      // Closes the file when the platform answered before reading all of it, or was never reached.
      file?.destroy();
    }
  }
}

/** `server` as a directory URL: query and fragment dropped, the path ending with "/". */
function baseUrl(server: URL): URL {
  const base = new URL(server.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  return base;
}

function jsonBody(value: unknown): RequestBody {
  return { kind: "json", bytes: new TextEncoder().encode(JSON.stringify(value)) };
}

/**
 * The file as a stream, opened first so a missing file fails here (with its fs error) and not as a
 * network failure; its size must be `sizeBytes`, the Content-Length sent.
 */
async function openFile(file: CheckpointFile): Promise<Readable> {
  const handle = await open(file.path, "r");
  try {
    const { size } = await handle.stat();
    if (size !== file.sizeBytes) {
      throw new RangeError(`${file.path} is ${size} bytes, not sizeBytes (${file.sizeBytes})`);
    }
  } catch (error) {
    await handle.close();
    throw error;
  }
  return createReadStream("", { fd: handle });
}

/** The body as UTF-8, refusing more than MAX_RESPONSE_BYTES without buffering them. */
async function readBounded(response: Response): Promise<string> {
  const text = await readBoundedText(response, MAX_RESPONSE_BYTES);
  if (text === undefined) throw oversized(response.status);
  return text;
}

function oversized(status: number): PlatformRequestError {
  return new PlatformRequestError(
    PlatformClientErrorCode.BAD_RESPONSE,
    `the platform's answer is larger than ${MAX_RESPONSE_BYTES} bytes`,
    { status },
  );
}

/** A 2xx answer parsed with `schema`, or the error it reports. */
function parseAnswer<S extends z.ZodType>(status: number, text: string, schema: S, url: URL): z.output<S> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (status >= 300 && status < 400) {
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the platform redirects POST ${url.pathname} (${status}); use its final address as the server`,
      { status },
    );
  }
  if (status < 200 || status >= 300) {
    const refused = errorBodySchema.safeParse(json);
    if (refused.success) {
      const { code, message } = refused.data.error;
      throw new PlatformRequestError(code.slice(0, 64), `the platform refused: ${message.slice(0, 500)}`, {
        status,
      });
    }
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the platform answered ${status} to POST ${url.pathname} without an error body; check that the server is the Barnraise platform`,
      { status },
    );
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const where = parsed.error.issues.map((issue) => issue.path.join(".") || "(body)").join(", ");
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the platform's answer to POST ${url.pathname} is not what this aux peer expects (${where}); check the server, or update the aux peer`,
      { status, cause: parsed.error },
    );
  }
  return parsed.data;
}

function describeNetworkError(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined;
  if (typeof code === "string") return code;
  return cause instanceof Error ? cause.message : String(cause);
}
