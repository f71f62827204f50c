import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { BlobStore } from "../storage/blob-store.ts";

/**
 * A store in the directory `directory` (created when the first file is written): one file per
 * name, written through a temporary file and a rename, so a crash never leaves half a file.
 */
export function directoryStore(directory: string): BlobStore {
  return {
    location: directory,
    describe: (name) => join(directory, name),
    get: async (name) => {
      try {
        return new Uint8Array(await readFile(join(directory, name)));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
        throw error;
      }
    },
    put: async (name, bytes) => {
      const path = join(directory, name);
      const temporary = `${path}.${randomBytes(6).toString("hex")}.tmp`;
      try {
        await mkdir(directory, { recursive: true });
        await writeFile(temporary, bytes);
        await rename(temporary, path);
      } catch (error) {
        await rm(temporary, { force: true }).catch(() => undefined);
        throw error;
      }
    },
    within: (name) => directoryStore(join(directory, name)),
  };
}
