import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";

/**
 * Small files only this user may read (identity, authority pin): written atomically (a temporary
 * file, fsync, rename) so a crash never leaves half a file, and refused on load when others can
 * read them.
 */

/** Writes `text` to `path` with mode 0600 (directory 0700), replacing any file there atomically. */
export async function writePrivateFileAtomic(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temporary = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  const file = await open(temporary, "wx", 0o600);
  try {
    try {
      await file.writeFile(text);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temporary, path);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
}

/** Why a private file could not be read. */
export class PrivateFileError extends Error {
  override readonly name = "PrivateFileError";
  readonly path: string;
  /** What is wrong, without the path. */
  readonly reason: string;

  constructor(path: string, reason: string, options?: { cause?: unknown }) {
    super(`${path}: ${reason}`, options);
    this.path = path;
    this.reason = reason;
  }
}

/** The file's text; undefined when it does not exist. Refuses a file that other users can read. */
export async function readPrivateFile(path: string): Promise<string | undefined> {
  try {
    const info = await stat(path);
    if ((info.mode & 0o077) !== 0) {
      throw new PrivateFileError(path, `is readable by other users; run: chmod 600 ${path}`);
    }
    return await readFile(path, "utf8");
  } catch (error) {
    if (error instanceof PrivateFileError) throw error;
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new PrivateFileError(path, "cannot be read", { cause: error });
  }
}
