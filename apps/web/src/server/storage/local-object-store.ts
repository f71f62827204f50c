import {
  access,
  constants,
  copyFile,
  mkdir,
  open,
  readdir,
  rename,
  rm,
  rmdir,
  stat,
  type FileHandle,
} from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { fileStream } from "./file-stream.ts";
import { openStagingDir, stagingName } from "./staging-dir.ts";
import {
  assertObjectKey,
  assertObjectPrefix,
  isObjectKey,
  ObjectNotFoundError,
  StorageUnavailableError,
  type ByteSpan,
  type ObjectInfo,
  type ObjectStore,
  type StagedObject,
} from "./object-store.ts";

/**
 * Objects as files under a local directory (the platform's data dir): the key is the relative path,
 * so `checkpoints/<experiment>/<uuid>.ckpt`, `models/<sha256>/model.json` and
 * `datasets/<name>/manifest.json` are where earlier versions of the platform kept them.
 *
 * An upload is written to `<root>/.staging/<pid>-<incarnation>-<uuid>.part`, then fsynced and renamed into place
 * (rename is atomic within one file system), and the directory is fsynced so the new name survives a
 * power loss. A process killed mid-upload leaves only its staging file, which the next store opened
 * on the same root deletes: opening the store sweeps staging entries (and scratch directories, which
 * live there too) whose process is gone, or had this pid in a former incarnation, as in a container
 * restarted as pid 1 (see staging-dir.ts). Uploads in progress in live processes are left alone. No key has a segment starting with ".", so `.staging` is never listed.
 */
export class LocalObjectStore implements ObjectStore {
  readonly root: string;
  readonly scratchDir: string;

  /** Opens the store, creating its staging directory and sweeping abandoned staging entries. */
  constructor(root: string) {
    this.root = root;
    this.scratchDir = openStagingDir(join(root, ".staging"));
  }

  get location(): string {
    return this.root;
  }

  async stage(key: string): Promise<StagedObject> {
    const target = this.#pathOf(key);
    const path = join(this.scratchDir, stagingName(".part"));
    const handle = await open(path, "wx");
    return new LocalStagedObject(handle, path, target);
  }

  async put(key: string, bytes: Uint8Array): Promise<void> {
    const staged = await this.stage(key);
    try {
      await staged.write(bytes);
      await staged.commit();
    } finally {
      await staged.discard();
    }
  }

  async putFile(key: string, path: string): Promise<void> {
    const target = this.#pathOf(key);
    const handle = await open(path, "r+");
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    try {
      await renameInto(path, target);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EXDEV") throw error;
      // Another file system: copied to a staging file there, then renamed into place.
      const staging = join(this.scratchDir, stagingName(".part"));
      try {
        await copyFile(path, staging);
        await syncFile(staging);
        await renameInto(staging, target);
      } finally {
        await rm(staging, { force: true });
      }
      await rm(path, { force: true });
    }
    await syncDirectory(dirname(target));
  }

  async head(key: string): Promise<ObjectInfo | null> {
    assertObjectKey(key);
    try {
      const info = await stat(this.#pathOf(key));
      return info.isFile() ? { key, size: info.size } : null;
    } catch (error) {
      if (isNotFound(error)) return null;
      throw error;
    }
  }

  async read(key: string, range?: ByteSpan): Promise<ReadableStream<Uint8Array>> {
    let handle: FileHandle;
    try {
      handle = await open(this.#pathOf(key), "r");
    } catch (error) {
      if (isNotFound(error) || (error as NodeJS.ErrnoException).code === "EISDIR") {
        throw new ObjectNotFoundError(key);
      }
      throw error;
    }
    try {
      const end = range?.end ?? (await handle.stat()).size - 1;
      return fileStream(handle, range?.start ?? 0, end);
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    assertObjectPrefix(prefix);
    const dir = join(this.root, prefix);
    let entries;
    try {
      entries = await readdir(dir, { recursive: true, withFileTypes: true });
    } catch (error) {
      if (isNotFound(error)) return [];
      throw error;
    }
    const objects: ObjectInfo[] = [];
    for (const entry of entries) {
      if (!entry.isFile()) continue;
      const key = prefix + relative(dir, join(entry.parentPath, entry.name)).split(sep).join("/");
      if (!isObjectKey(key)) continue;
      const info = await this.head(key);
      if (info !== null) objects.push(info);
    }
    return objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async remove(key: string): Promise<void> {
    const path = this.#pathOf(key);
    await rm(path, { force: true });
    // Empty directories left behind are pruned, up to (not including) the root.
    for (let dir = dirname(path); dir.startsWith(this.root + sep); dir = dirname(dir)) {
      try {
        await rmdir(dir);
      } catch {
        break;
      }
    }
  }

  async check(): Promise<void> {
    try {
      await access(this.scratchDir, constants.W_OK);
    } catch (error) {
      throw new StorageUnavailableError(`the data directory ${this.root} is not writable (${String(error)})`);
    }
  }

  #pathOf(key: string): string {
    assertObjectKey(key);
    return join(this.root, ...key.split("/"));
  }
}

class LocalStagedObject implements StagedObject {
  readonly #handle: FileHandle;
  readonly #path: string;
  readonly #target: string;
  #closed = false;

  constructor(handle: FileHandle, path: string, target: string) {
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

  async commit(): Promise<void> {
    await this.#handle.sync();
    await this.#close();
    await renameInto(this.#path, this.#target);
    await syncDirectory(dirname(this.#target));
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

/**
 * Renames `from` to `target`, creating the target's directory; tried again when a concurrent
 * `remove` pruned that directory between the two steps.
 */
async function renameInto(from: string, target: string): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    await mkdir(dirname(target), { recursive: true });
    try {
      await rename(from, target);
      return;
    } catch (error) {
      if (attempt >= 3 || (error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
}

async function syncFile(path: string): Promise<void> {
  const handle = await open(path, "r+");
  try {
    await handle.sync();
  } finally {
    await handle.close();
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

function isNotFound(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}
