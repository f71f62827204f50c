import { BrandedError } from "@barnraise/protocol";
/**
 * Where the platform keeps its files: checkpoints (`checkpoints/<experiment>/<uuid>.ckpt`), uploaded
 * models (`models/<sha256>/…`) and dataset shards and manifests (`datasets/<name>/…`). One interface,
 * two implementations chosen once in the server context: a local directory (local-object-store.ts,
 * the default) and any S3-compatible store (s3-object-store.ts, `BARNRAISE_STORAGE_URL=s3://…`).
 *
 * Writes are atomic: an object is written through a staged upload and becomes visible under its key
 * only when committed, whole, so a reader never finds or lists a half-written object and a crashed
 * or discarded upload leaves nothing under a visible key. Objects are immutable once written, except
 * that a commit may replace an object of the same key as a whole.
 */
export interface ObjectStore {
  /** Where the objects are, for logs and messages: a directory, or `s3://bucket/prefix`. */
  readonly location: string;
  /**
   * A local directory for files built before they are put (dataset conversions). Entries named
   * `<pid>-…` are removed when the store is next opened after their process is gone.
   */
  readonly scratchDir: string;
  /** Opens a staged upload of the object `key`; nothing is visible under `key` until `commit`. */
  stage(key: string): Promise<StagedObject>;
  /** Writes the whole object `key` from bytes in memory (small objects: manifests, model.json). */
  put(key: string, bytes: Uint8Array): Promise<void>;
  /** Writes the object `key` from a local file, which is consumed (moved or deleted). */
  putFile(key: string, path: string): Promise<void>;
  /** The object's size, or null when there is none. */
  head(key: string): Promise<ObjectInfo | null>;
  /**
   * Bytes `range.start…range.end` (inclusive; the whole object without a range) as a stream. The
   * object is found before this resolves: a missing one is ObjectNotFoundError, not a broken stream.
   */
  read(key: string, range?: ByteSpan): Promise<ReadableStream<Uint8Array>>;
  /** Every object whose key starts with `prefix` (which ends with "/"), by key. */
  list(prefix: string): Promise<ObjectInfo[]>;
  /** Deletes the object `key`; nothing happens when there is none. */
  remove(key: string): Promise<void>;
  /** Throws a StorageUnavailableError saying why when the store cannot be reached or used. */
  check(): Promise<void>;
}

export interface StagedObject {
  /** Appends bytes; resolves once the store has taken them (the caller's backpressure). */
  write(chunk: Uint8Array): Promise<void>;
  /** Makes the staged bytes durable and visible under the staged key, atomically. */
  commit(): Promise<void>;
  /** Drops the staged bytes. Safe to call more than once, and after a commit (then a no-op). */
  discard(): Promise<void>;
}

export interface ObjectInfo {
  readonly key: string;
  readonly size: number;
}

/** Bytes `start…end`, both inclusive. */
export interface ByteSpan {
  readonly start: number;
  readonly end: number;
}

/** The object a read asked for is not in the store. */
export class ObjectNotFoundError extends BrandedError {
  static override readonly brand = Symbol.for("barnraise.ObjectNotFoundError");
  override readonly name = "ObjectNotFoundError";
  readonly key: string;

  constructor(key: string) {
    super(`no object has the key ${key}`);
    this.key = key;
  }
}

/** The store cannot be reached, or refuses the platform's credentials. */
export class StorageUnavailableError extends BrandedError {
  static override readonly brand = Symbol.for("barnraise.StorageUnavailableError");
  override readonly name = "StorageUnavailableError";
}

/**
 * Keys are `/`-separated segments of letters, digits, `_`, `-` and `.`, each starting with a letter,
 * digit or `_`: never empty, `.`, `..` or hidden, so a key is a safe relative path on disk (where
 * the local store keeps its own `.staging/`) and the same object key on S3.
 */
const KEY_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
const MAX_KEY_LENGTH = 512;

export function isObjectKey(key: string): boolean {
  return key.length <= MAX_KEY_LENGTH && key.split("/").every((segment) => KEY_SEGMENT.test(segment));
}

/** Throws a RangeError for a key that `isObjectKey` refuses. */
export function assertObjectKey(key: string): void {
  if (!isObjectKey(key)) throw new RangeError(`not a storage key: ${JSON.stringify(key)}`);
}

/** Throws a RangeError unless `prefix` is keys' leading segments followed by "/". */
export function assertObjectPrefix(prefix: string): void {
  if (!prefix.endsWith("/") || !isObjectKey(prefix.slice(0, -1))) {
    throw new RangeError(`not a storage prefix: ${JSON.stringify(prefix)}`);
  }
}

/** A whole object in memory (or the span), for small objects. ObjectNotFoundError when it is absent. */
export async function readObjectBytes(
  store: ObjectStore,
  key: string,
  range?: ByteSpan,
): Promise<Uint8Array> {
  const reader = (await store.read(key, range)).getReader();
  const chunks: Uint8Array[] = [];
  for (let next = await reader.read(); !next.done; next = await reader.read()) chunks.push(next.value);
  return new Uint8Array(Buffer.concat(chunks));
}

/** The object's bytes, or null when there is none. */
export async function readObjectIfPresent(store: ObjectStore, key: string): Promise<Uint8Array | null> {
  try {
    return await readObjectBytes(store, key);
  } catch (error) {
    if (error instanceof ObjectNotFoundError) return null;
    throw error;
  }
}

/** Deletes every object under `prefix`. */
export async function removePrefix(store: ObjectStore, prefix: string): Promise<void> {
  for (const object of await store.list(prefix)) await store.remove(object.key);
}
