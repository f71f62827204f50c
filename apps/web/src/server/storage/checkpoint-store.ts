import type { ObjectInfo, ObjectStore, StagedObject } from "./object-store.ts";

/**
 * Checkpoint files in the platform's object store, under `checkpoints/<storage key>`. A storage key,
 * recorded in the checkpoint's row, is `<experiment id>/<uuid>.ckpt`: safe as a relative path and
 * as an object key. An upload is staged and becomes visible only when committed, whole, after it
 * was verified (see upload-checkpoint.ts); a crashed upload leaves nothing under a visible key.
 */

/** Storage keys are `<experiment id>/<name>.ckpt`. */
export const STORAGE_KEY_PATTERN = /^[A-Za-z0-9_-]{1,64}\/[A-Za-z0-9_-]{1,128}\.ckpt$/;

export function isStorageKey(value: string): boolean {
  return STORAGE_KEY_PATTERN.test(value);
}

/** The object key of the checkpoint stored under `storageKey`. */
export function checkpointObjectKey(storageKey: string): string {
  if (!isStorageKey(storageKey)) throw new RangeError(`not a checkpoint storage key: ${storageKey}`);
  return `checkpoints/${storageKey}`;
}

/** Opens a staged upload of the checkpoint `storageKey`. */
export function stageCheckpoint(storage: ObjectStore, storageKey: string): Promise<StagedObject> {
  return storage.stage(checkpointObjectKey(storageKey));
}

/** The stored checkpoint file (its object key and size), or null when there is none. */
export async function findCheckpoint(storage: ObjectStore, storageKey: string): Promise<ObjectInfo | null> {
  if (!isStorageKey(storageKey)) return null;
  return await storage.head(checkpointObjectKey(storageKey));
}

/** Deletes the checkpoint file `storageKey`; nothing happens when there is none. */
export async function removeCheckpoint(storage: ObjectStore, storageKey: string): Promise<void> {
  if (!isStorageKey(storageKey)) return;
  await storage.remove(checkpointObjectKey(storageKey));
}
