import { randomUUID } from "node:crypto";
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { mkdir, open, rename, rm, stat, type FileHandle } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  isStorageKey,
  type CheckpointStore,
  type StagedCheckpoint,
  type StoredCheckpoint,
} from "./checkpoint-store.ts";

/**
 * Checkpoints on local disk: `<root>/<experiment id>/<name>.ckpt`.
 *
 * An upload is written to `<root>/.staging/<pid>-<uuid>.part`, then fsynced and renamed into place
 * (rename is atomic within one file system), and the directory is fsynced so the new name survives a
 * power loss. A process killed mid-upload leaves only its staging file, which the next store opened
 * on the same root deletes: opening the store sweeps staging files whose process is gone (or is this
 * process, i.e. a former incarnation with the same pid, as in a container restarted as pid 1).
 * Uploads in progress in other live processes on the same root are left alone.
 */
export class LocalCheckpointStore implements CheckpointStore {
  readonly root: string;
  readonly stagingDir: string;

  /** Opens the store, creating its directories and sweeping abandoned staging files. */
  constructor(root: string) {
    this.root = root;
    this.stagingDir = join(root, ".staging");
    mkdirSync(this.stagingDir, { recursive: true });
    this.#sweepStaging();
  }

  async stage(): Promise<StagedCheckpoint> {
    const path = join(this.stagingDir, `${process.pid}-${randomUUID()}.part`);
    const handle = await open(path, "wx");
    return new LocalStagedCheckpoint(handle, path, (key) => this.#pathOf(key));
  }

  async find(storageKey: string): Promise<StoredCheckpoint | null> {
    if (!isStorageKey(storageKey)) return null;
    const path = this.#pathOf(storageKey);
    try {
      const info = await stat(path);
      return info.isFile() ? { size: info.size, path } : null;
    } catch (error) {
      if (isNotFound(error)) return null;
      throw error;
    }
  }

  async remove(storageKey: string): Promise<void> {
    if (!isStorageKey(storageKey)) return;
    await rm(this.#pathOf(storageKey), { force: true });
  }

  #pathOf(storageKey: string): string {
    if (!isStorageKey(storageKey)) throw new RangeError(`not a checkpoint storage key: ${storageKey}`);
    return join(this.root, storageKey);
  }

  #sweepStaging(): void {
    for (const name of readdirSync(this.stagingDir)) {
      const pid = Number(/^(\d+)-/.exec(name)?.[1]);
      if (Number.isSafeInteger(pid) && pid !== process.pid && isProcessAlive(pid)) continue;
      rmSync(join(this.stagingDir, name), { recursive: true, force: true });
    }
  }
}

class LocalStagedCheckpoint implements StagedCheckpoint {
  readonly #handle: FileHandle;
  readonly #path: string;
  readonly #target: (storageKey: string) => string;
  #closed = false;

  constructor(handle: FileHandle, path: string, target: (storageKey: string) => string) {
    this.#handle = handle;
    this.#path = path;
    this.#target = target;
  }

  async write(chunk: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < chunk.byteLength) {
      const { bytesWritten } = await this.#handle.write(chunk, offset);
      offset += bytesWritten;
    }
  }

  async commit(storageKey: string): Promise<void> {
    const target = this.#target(storageKey);
    await this.#handle.sync();
    await this.#close();
    await mkdir(dirname(target), { recursive: true });
    await rename(this.#path, target);
    await syncDirectory(dirname(target));
  }

  async discard(): Promise<void> {
    await this.#close();
    await rm(this.#path, { force: true });
  }

  async #close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#handle.close();
  }
}

async function syncDirectory(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function isNotFound(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}
