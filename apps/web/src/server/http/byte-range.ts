import { open, type FileHandle } from "node:fs/promises";
import { AppError, AppErrorCode } from "../app-error.ts";
import { fileStream } from "../storage/file-stream.ts";
import { ObjectNotFoundError, type ByteSpan, type ObjectStore } from "../storage/object-store.ts";
import { errorResponse } from "./route.ts";

/**
 * Serves a file from disk (`fileResponse`: the programs) or an object of the platform's store
 * (`objectResponse`: checkpoints, model files, dataset shards) with HTTP range support (RFC 9110 §14):
 *
 * - a single `Range: bytes=a-b | a- | -n` → 206 with `Content-Range`; the end is clamped to the size;
 * - a range that starts at or beyond the end (or `-0`, or any range of an empty file) → 416 with the
 *   unsatisfied `Content-Range` form (`bytes *` and the size) and the error body RANGE_NOT_SATISFIABLE;
 * - several ranges, another unit, or a malformed header → the whole file, 200 (the header is ignored);
 * - `If-Range` that does not match the ETag → the whole file, 200;
 * - `If-None-Match` matching the ETag (or `*`) → 304 without a body;
 * - `HEAD` → the headers of the GET without a body.
 *
 * `etag` is the entity tag's opaque value (e.g. a sha256 hex); it is quoted here unless it already
 * is (`"…"` or `W/"…"`). Without one, a weak tag is derived from the file's size and mtime.
 * The body streams from disk; the file is opened before the response is built, so a missing file
 * is a NOT_FOUND error (thrown) and not a broken stream. `Content-Length` is set, but Next.js 16.4
 * drops it from route-handler responses and sends the body chunked; `Content-Range` keeps the size.
 */
export async function fileResponse(
  req: Request,
  file: {
    path: string;
    size: number;
    contentType: string;
    etag?: string;
    /** Sets `Content-Disposition: attachment` with this name. */
    filename?: string;
    /** Defaults to `no-cache` (clients revalidate with the ETag). */
    cacheControl?: string;
  },
): Promise<Response> {
  const handle = await openFile(file.path);
  const body = { streaming: false };
  try {
    const etag = file.etag !== undefined ? quoteEtag(file.etag) : await derivedEtag(handle, file.size);
    return await rangedResponse(req, { ...file, etag }, (start, end) => {
      body.streaming = true;
      return Promise.resolve(fileStream(handle, start, end));
    });
  } finally {
    // Once streaming, the body owns the handle and closes it at the end, on error or on cancel.
    if (!body.streaming) await handle.close();
  }
}

/** What `objectResponse` serves. */
export interface ServedObject {
  readonly storage: ObjectStore;
  readonly key: string;
  readonly size: number;
  readonly contentType: string;
  /** The entity tag's opaque value, e.g. the file's sha256. */
  readonly etag: string;
  /** Sets `Content-Disposition: attachment` with this name. */
  readonly filename?: string;
  /** Defaults to `no-cache` (clients revalidate with the ETag). */
  readonly cacheControl?: string;
}

/**
 * An object of the platform's store (a checkpoint, a model file, a dataset shard), served as
 * `fileResponse` serves a file: the same ranges, conditional requests and errors. The bytes served
 * are read (one ranged read) before the response is built, so an object that is gone is a
 * NOT_FOUND error (thrown) and not a broken stream.
 */
export async function objectResponse(req: Request, object: ServedObject): Promise<Response> {
  return await rangedResponse(req, { ...object, etag: quoteEtag(object.etag) }, (start, end) =>
    readObject(object.storage, object.key, { start, end }),
  );
}

async function rangedResponse(
  req: Request,
  file: { size: number; contentType: string; etag: string; filename?: string; cacheControl?: string },
  open: (start: number, end: number) => Promise<ReadableStream<Uint8Array>>,
): Promise<Response> {
  const etag = file.etag;
  const headers: Record<string, string> = {
    "accept-ranges": "bytes",
    etag,
    "cache-control": file.cacheControl ?? "no-cache",
  };
  if (file.filename !== undefined) headers["content-disposition"] = contentDisposition(file.filename);

  if (etagListMatches(req.headers.get("if-none-match"), etag)) {
    return new Response(null, { status: 304, headers });
  }

  const range = selectRange(req, file.size, etag);
  if (range === "unsatisfiable") {
    return errorResponse(
      new AppError(
        AppErrorCode.RANGE_NOT_SATISFIABLE,
        `the requested range is not within the file's ${file.size} bytes`,
        { headers: { "content-range": `bytes */${file.size}`, "accept-ranges": "bytes" } },
      ),
    );
  }

  headers["content-type"] = file.contentType;
  const start = range?.start ?? 0;
  const end = range?.end ?? file.size - 1;
  const length = end - start + 1;
  headers["content-length"] = String(length);
  if (range !== undefined) headers["content-range"] = `bytes ${start}-${end}/${file.size}`;
  const status = range !== undefined ? 206 : 200;

  if (req.method === "HEAD" || length === 0) return new Response(null, { status, headers });
  return new Response(await open(start, end), { status, headers });
}

/** Bytes `range` (the whole object without one) of an object of the store; a missing one is NOT_FOUND. */
export async function readObject(
  storage: ObjectStore,
  key: string,
  range?: ByteSpan,
): Promise<ReadableStream<Uint8Array>> {
  try {
    return await storage.read(key, range);
  } catch (error) {
    if (error instanceof ObjectNotFoundError) {
      throw new AppError(AppErrorCode.NOT_FOUND, "the file is not available");
    }
    throw error;
  }
}

/**
 * A whole file made here: `prefix` (built in memory, e.g. an export's header), then bytes
 * `start…end` (inclusive) of the object `key` of the store, streamed. No range support: 200, or
 * NOT_FOUND (thrown) when the object is gone.
 */
export async function prefixedObjectResponse(file: {
  storage: ObjectStore;
  key: string;
  prefix: Uint8Array;
  start: number;
  end: number;
  contentType: string;
  etag: string;
  filename: string;
  cacheControl: string;
}): Promise<Response> {
  const rest = (await readObject(file.storage, file.key, { start: file.start, end: file.end })).getReader();
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        controller.enqueue(file.prefix);
      },
      async pull(controller) {
        const { done, value } = await rest.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
      async cancel(reason) {
        await rest.cancel(reason);
      },
    },
    { highWaterMark: 1 },
  );
  return new Response(body, {
    status: 200,
    headers: {
      "content-type": file.contentType,
      "content-length": String(file.prefix.length + file.end + 1 - file.start),
      etag: quoteEtag(file.etag),
      "cache-control": file.cacheControl,
      "content-disposition": contentDisposition(file.filename),
    },
  });
}

export interface ByteRange {
  /** First byte, inclusive. */
  readonly start: number;
  /** Last byte, inclusive. */
  readonly end: number;
}

/**
 * The range to serve for `Range` (and `If-Range`): undefined for the whole file, "unsatisfiable"
 * for a well-formed single range that selects no byte of it.
 */
export function selectRange(
  req: Request,
  size: number,
  etag: string,
): ByteRange | "unsatisfiable" | undefined {
  const header = req.headers.get("range");
  if (header === null) return undefined;
  const ifRange = req.headers.get("if-range");
  // If-Range with a date or another tag: the client's copy is stale, so it gets the whole file.
  if (ifRange !== null && !strongMatch(ifRange.trim(), etag)) return undefined;
  return parseRange(header, size);
}

/**
 * Parses a `Range` header against a file of `size` bytes. Only one `bytes` range is honoured; any
 * other form returns undefined (serve the whole file), as RFC 9110 allows.
 */
export function parseRange(header: string, size: number): ByteRange | "unsatisfiable" | undefined {
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (match === null) return undefined;
  const [, first = "", last = ""] = match;
  if (first === "" && last === "") return undefined;
  if (first === "") {
    const suffix = Number(last);
    if (!Number.isSafeInteger(suffix)) return undefined;
    if (suffix === 0 || size === 0) return "unsatisfiable";
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === "" ? Number.MAX_SAFE_INTEGER : Number(last);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) return undefined;
  if (end < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end: Math.min(end, size - 1) };
}

/** Opens a file to serve; a missing one is NOT_FOUND. */
export async function openFile(path: string): Promise<FileHandle> {
  try {
    return await open(path, "r");
  } catch (error) {
    if (isNodeError(error) && (error.code === "ENOENT" || error.code === "EISDIR")) {
      throw new AppError(AppErrorCode.NOT_FOUND, "the file is not available");
    }
    throw error;
  }
}

async function derivedEtag(handle: FileHandle, size: number): Promise<string> {
  const stat = await handle.stat();
  return `W/"${size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
}

function quoteEtag(value: string): string {
  return /^(W\/)?"[^"]*"$/.test(value) ? value : `"${value.replace(/"/g, "")}"`;
}

function opaque(tag: string): string {
  return tag.startsWith("W/") ? tag.slice(2) : tag;
}

/** If-None-Match uses the weak comparison: `W/"x"` matches `"x"`. */
export function etagListMatches(header: string | null, etag: string): boolean {
  if (header === null) return false;
  if (header.trim() === "*") return true;
  return header
    .split(",")
    .map((tag) => tag.trim())
    .some((tag) => tag.length > 0 && opaque(tag) === opaque(etag));
}

/** If-Range uses the strong comparison: weak tags never match. */
function strongMatch(tag: string, etag: string): boolean {
  return !tag.startsWith("W/") && !etag.startsWith("W/") && tag === etag;
}

function contentDisposition(filename: string): string {
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, "_");
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(filename)}`;
}

function isNodeError(error: unknown): error is NodeJS.ErrnoException {
  return error instanceof Error && "code" in error;
}
