import { randomBytes, randomUUID } from "node:crypto";
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

/**
 * A local staging directory shared by the processes of one data dir: its entries are named
 * `<pid>-<incarnation>-…` by the process that made them (`stagingName`). Opening it creates it and
 * removes the entries whose process is gone, or had this pid in a former incarnation, as in a
 * container restarted as pid 1; entries of other live processes and of this one are left alone.
 */
export function openStagingDir(dir: string): string {
  mkdirSync(dir, { recursive: true });
  for (const name of readdirSync(dir)) {
    const [, pidText, incarnation] = /^(\d+)-(?:([0-9a-f]{12})-)?/.exec(name) ?? [];
    const pid = Number(pidText);
    const live =
      pid === process.pid ? incarnation === INCARNATION : Number.isSafeInteger(pid) && isProcessAlive(pid);
    if (live) continue;
    rmSync(join(dir, name), { recursive: true, force: true });
  }
  return dir;
}

/** This process, told apart from an earlier process that had the same pid. */
const INCARNATION = randomBytes(6).toString("hex");

/** A new, unique name for an entry of a staging directory, ending with `suffix`. */
export function stagingName(suffix: string): string {
  return `${process.pid}-${INCARNATION}-${randomUUID()}${suffix}`;
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
