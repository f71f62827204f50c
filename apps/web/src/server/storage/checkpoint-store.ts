/**
 * Where checkpoint files live. The platform keeps them on local disk by default
 * (local-checkpoint-store.ts); the contract is small enough for an S3-compatible store to follow
 * (staging = a multipart upload, commit = completing it).
 *
 * An upload is staged first and becomes visible only when it is committed, in one atomic step, so a
 * reader never sees a half-written file and a crashed upload leaves nothing under a visible key.
 */
export interface CheckpointStore {
  /** Opens a staging area for one upload. */
  stage(): Promise<StagedCheckpoint>;
  /** The stored file under `storageKey`, or null when there is none. */
  find(storageKey: string): Promise<StoredCheckpoint | null>;
  /** Deletes the file under `storageKey`; nothing happens when there is none. */
  remove(storageKey: string): Promise<void>;
}

export interface StagedCheckpoint {
  /** Appends bytes; resolves once the store has taken them (the caller's backpressure). */
  write(chunk: Uint8Array): Promise<void>;
  /** Makes the staged bytes durable and visible under `storageKey`, atomically. */
  commit(storageKey: string): Promise<void>;
  /** Drops the staged bytes. Safe to call more than once, and after a failed commit. */
  discard(): Promise<void>;
}

export interface StoredCheckpoint {
  readonly size: number;
  /**
   * The file's path on this machine: the HTTP layer streams it from there, with range support. A
   * remote store would offer a ranged stream (or a pre-signed URL) here instead.
   */
  readonly path: string;
}

/** Storage keys are `<experiment id>/<name>.ckpt`, safe as a relative path and as an object key. */
export const STORAGE_KEY_PATTERN = /^[A-Za-z0-9_-]{1,64}\/[A-Za-z0-9_-]{1,128}\.ckpt$/;

export function isStorageKey(value: string): boolean {
  return STORAGE_KEY_PATTERN.test(value);
}
