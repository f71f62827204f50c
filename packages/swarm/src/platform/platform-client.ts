import { signRequest, type KeyPair } from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { z } from "zod";
import type { AuthorityKeys } from "./authority-keys.ts";
import { readBoundedBytes, readBoundedText } from "./bounded-body.ts";

/**
 * A node's (trainer's or aux peer's) client for the platform's experiment routes. Calls that need
 * the node's identity are DeDLOC I.5 signed requests (`Authorization: Barnraise <signed request>`):
 * signed for their exact method, path and query, addressed to the experiment's current authority key
 * (read from `authority` at each call, so requests follow a key rotation), with
 * the node's current pass, the time, a fresh nonce and the body's SHA-256. Public reads go unsigned.
 * Every failure is a PlatformRequestError that says whether trying again can help.
 */

export const DEFAULT_PLATFORM_TIMEOUT_MS = 30_000;
/** An upload or download may take this many times the per-request timeout. */
export const TRANSFER_TIMEOUT_FACTOR = 10;
/** JSON answers larger than this are refused (a run control with a long revocation list fits). */
export const MAX_RESPONSE_BYTES = 1024 * 1024;

export interface PlatformClientOptions {
  /** The platform's base URL; a path prefix is kept (https://host/barnraise/ → …/barnraise/api/v1/…). */
  server: URL;
  experimentId: string;
  /** The node's identity: the key its pass was issued for. */
  keyPair: KeyPair;
  /** The experiment's authority (from the verified join): every signed request is addressed to its current key. */
  authority: AuthorityKeys;
  /** The node's current pass token, read for every request (the pass is refreshed while running). */
  pass: () => string;
  fetch?: typeof fetch;
  /** Per request, answer included; uploads and downloads get TRANSFER_TIMEOUT_FACTOR times as long. */
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

/** A file to stream as a request body, described by its size and SHA-256 (the signed digest). */
/** A file to send (a checkpoint): its size and digest, and how to read it. */
export interface UploadFile {
  readonly sizeBytes: number;
  /** The file's SHA-256 (32 bytes): the signed body digest. */
  readonly sha256: Uint8Array;
  /**
   * Opens the file: its bytes as a stream, and how to let go of it (called whether or not the stream
   * was read to its end). Throws when the file cannot be read or is not `sizeBytes` long.
   */
  open(): Promise<{ readonly stream: ReadableStream<Uint8Array>; close(): void }>;
}

export type RequestBody =
  | { readonly kind: "none" }
  | { readonly kind: "json"; readonly bytes: Uint8Array<ArrayBuffer> }
  | { readonly kind: "file"; readonly file: UploadFile };

const errorBodySchema = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

export class PlatformClient {
  readonly experimentId: string;
  /** The experiment's authority as this node knows it. */
  readonly authority: AuthorityKeys;
  readonly #options: PlatformClientOptions;
  readonly #base: URL;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;
  readonly #now: () => number;

  constructor(options: PlatformClientOptions) {
    if (options.server.protocol !== "http:" && options.server.protocol !== "https:") {
      throw new TypeError(`the server must be an http:// or https:// URL, not ${options.server.protocol}`);
    }
    if (options.experimentId === "") throw new TypeError("experimentId must not be empty");
    this.experimentId = options.experimentId;
    this.authority = options.authority;
    this.#options = options;
    this.#base = baseUrl(options.server);
    // Bound: a browser refuses a fetch called as another object's method ("Illegal invocation").
    this.#fetch = options.fetch ?? fetch.bind(globalThis);
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_PLATFORM_TIMEOUT_MS;
    this.#now = options.now ?? Date.now;
  }

  /** The URL of `api/v1/experiments/<id>/<route>`, or of a platform path starting with "/". */
  url(route: string): URL {
    if (route.startsWith("/")) return new URL(route.slice(1), this.#base);
    return new URL(`api/v1/experiments/${encodeURIComponent(this.experimentId)}/${route}`, this.#base);
  }

  /** A signed call to the experiment route `route`, its 2xx answer parsed with `schema`. */
  async signed<S extends z.ZodType>(
    method: "GET" | "POST",
    route: string,
    options: { query?: URLSearchParams; body?: RequestBody; schema: S; signal?: AbortSignal | undefined },
  ): Promise<z.output<S>> {
    const url = this.url(route);
    if (options.query !== undefined) url.search = options.query.toString();
    const body = options.body ?? { kind: "none" };
    const authorization = signRequest(runtimeCrypto, this.#options.keyPair, {
      pass: this.#options.pass(),
      recipientPublicKey: this.authority.publicKey,
      scope: `${method} ${url.pathname}${url.search}`,
      body:
        body.kind === "json"
          ? body.bytes
          : body.kind === "file"
            ? { sha256: body.file.sha256 }
            : new Uint8Array(0),
      time: this.#now(),
    });
    return this.#request(method, url, body, `Barnraise ${authorization}`, options.schema, options.signal);
  }

  /** An unsigned GET of a public route, its 2xx answer parsed with `schema`. */
  async get<S extends z.ZodType>(route: string, schema: S, signal?: AbortSignal): Promise<z.output<S>> {
    return this.#request("GET", this.url(route), { kind: "none" }, undefined, schema, signal);
  }

  /**
   * Downloads a file the platform serves publicly (a checkpoint) into memory, refusing more than
   * `maxBytes` without buffering it.
   */
  async download(path: string, maxBytes: number, signal?: AbortSignal): Promise<Uint8Array> {
    const url = this.url(path);
    return this.#guard(url, TRANSFER_TIMEOUT_FACTOR, signal, async (combined) => {
      const response = await this.#fetch(url, { method: "GET", redirect: "manual", signal: combined });
      if (response.status !== 200) {
        const text = (await readBoundedText(response, MAX_RESPONSE_BYTES)) ?? "";
        parseAnswer("GET", response.status, text, z.unknown(), url);
        throw new PlatformRequestError(
          PlatformClientErrorCode.BAD_RESPONSE,
          `the platform answered ${response.status} to GET ${url.pathname}`,
          { status: response.status },
        );
      }
      const bytes = await readBoundedBytes(response, maxBytes);
      if (bytes === undefined) {
        throw new PlatformRequestError(
          PlatformClientErrorCode.BAD_RESPONSE,
          `${url.pathname} is larger than the ${maxBytes} bytes expected`,
          { status: response.status },
        );
      }
      return bytes;
    });
  }

  async #request<S extends z.ZodType>(
    method: "GET" | "POST",
    url: URL,
    body: RequestBody,
    authorization: string | undefined,
    schema: S,
    signal: AbortSignal | undefined,
  ): Promise<z.output<S>> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (authorization !== undefined) headers["authorization"] = authorization;
    // `duplex` is what Node's fetch needs to send a stream; not every RequestInit typing has it.
    let init: RequestInit & { duplex?: "half" } = {};
    let file: { close(): void } | undefined;
    if (body.kind === "json") {
      headers["content-type"] = "application/json";
      init = { body: body.bytes };
    } else if (body.kind === "file") {
      headers["content-type"] = "application/octet-stream";
      headers["content-length"] = String(body.file.sizeBytes);
      const opened = await body.file.open();
      file = opened;
      init = { body: opened.stream, duplex: "half" };
    }
    const factor = body.kind === "file" ? TRANSFER_TIMEOUT_FACTOR : 1;
    try {
      return await this.#guard(url, factor, signal, async (combined) => {
        const response = await this.#fetch(url, {
          ...init,
          method,
          headers,
          // A signature is bound to this URL: a redirect could only be refused, or send the pass elsewhere.
          redirect: "manual",
          signal: combined,
        });
        const text = await readBoundedText(response, MAX_RESPONSE_BYTES);
        if (text === undefined) {
          throw new PlatformRequestError(
            PlatformClientErrorCode.BAD_RESPONSE,
            `the platform's answer is larger than ${MAX_RESPONSE_BYTES} bytes`,
            { status: response.status },
          );
        }
        return parseAnswer(method, response.status, text, schema, url);
      });
    } finally {
      // Closes the file when the platform answered before reading all of it, or was never reached.
      file?.close();
    }
  }

  /** Runs `work` under the timeout and turns network failures into PlatformRequestErrors. */
  async #guard<T>(
    url: URL,
    factor: number,
    signal: AbortSignal | undefined,
    work: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    signal?.throwIfAborted();
    const timeoutMs = this.#timeoutMs * factor;
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal === undefined ? timeout : AbortSignal.any([signal, timeout]);
    try {
      return await work(combined);
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
    }
  }
}

/** A JSON request body. */
export function jsonBody(value: unknown): RequestBody {
  return { kind: "json", bytes: new TextEncoder().encode(JSON.stringify(value)) };
}

/** `server` as a directory URL: query and fragment dropped, the path ending with "/". */
function baseUrl(server: URL): URL {
  const base = new URL(server.href);
  base.search = "";
  base.hash = "";
  if (!base.pathname.endsWith("/")) base.pathname += "/";
  return base;
}

/** A 2xx answer parsed with `schema`, or the error it reports. */
function parseAnswer<S extends z.ZodType>(
  method: string,
  status: number,
  text: string,
  schema: S,
  url: URL,
): z.output<S> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (status >= 300 && status < 400) {
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the platform redirects ${method} ${url.pathname} (${status}); use its final address as the server`,
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
      `the platform answered ${status} to ${method} ${url.pathname} without an error body; check that the server is the Barnraise platform`,
      { status },
    );
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const where = parsed.error.issues.map((issue) => issue.path.join(".") || "(body)").join(", ");
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the platform's answer to ${method} ${url.pathname} is not what this node expects (${where}); check the server, or update this program`,
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
