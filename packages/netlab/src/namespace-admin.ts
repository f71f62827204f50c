/**
 * Listing, emptying and deleting network namespaces. Shared by `NetLab.destroy()` and
 * `NetLab.cleanupStale()`: both must first end every process still inside a namespace (a deleted
 * namespace lives on, with its veths, while a process holds it) and then delete it.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { NetLabError } from "./errors.ts";
import { ip, runProcess, systemTool } from "./run-command.ts";

/** Names of all named network namespaces (`ip netns list`). */
export async function listNamespaces(): Promise<string[]> {
  const out = await ip(["netns", "list"]);
  return out
    .split("\n")
    .map((line) => line.trim().split(/\s+/)[0] ?? "")
    .filter((name) => name !== "");
}

/** Process ids inside a namespace; empty when the namespace does not exist. */
export async function namespacePids(namespace: string): Promise<number[]> {
  const result = await runProcess(systemTool("ip"), ["netns", "pids", namespace]);
  if (result.exitCode !== 0) return [];
  return result.stdout
    .split("\n")
    .map((line) => Number(line.trim()))
    .filter((pid) => Number.isInteger(pid) && pid > 0 && pid !== process.pid);
}

function signal(pids: readonly number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

async function pidsIn(namespaces: readonly string[]): Promise<number[]> {
  const lists = await Promise.all(namespaces.map((ns) => namespacePids(ns)));
  return lists.flat();
}

async function waitUntilEmpty(namespaces: readonly string[], waitMs: number): Promise<number[]> {
  const deadline = Date.now() + waitMs;
  let pids = await pidsIn(namespaces);
  while (pids.length > 0 && Date.now() < deadline) {
    await sleep(25);
    pids = await pidsIn(namespaces);
  }
  return pids;
}

/**
 * Ends every process inside the namespaces: SIGTERM, up to `graceMs` to exit, then SIGKILL.
 * Resolves once none is left; throws CLEANUP_FAILED if some survive SIGKILL for a second.
 */
export async function killNamespaceProcesses(namespaces: readonly string[], graceMs = 1000): Promise<void> {
  let pids = await pidsIn(namespaces);
  if (pids.length === 0) return;
  signal(pids, "SIGTERM");
  pids = await waitUntilEmpty(namespaces, graceMs);
  if (pids.length === 0) return;
  signal(pids, "SIGKILL");
  pids = await waitUntilEmpty(namespaces, 1000);
  if (pids.length > 0) {
    throw new NetLabError(
      "CLEANUP_FAILED",
      `processes ${pids.join(", ")} survived SIGKILL in ${namespaces.join(", ")}`,
    );
  }
}

/**
 * Deletes the namespaces that exist (missing ones are fine: this runs after partial failures).
 * Throws CLEANUP_FAILED naming any that could not be deleted.
 */
export async function deleteNamespaces(namespaces: readonly string[]): Promise<void> {
  const existing = new Set(await listNamespaces());
  const failures: string[] = [];
  for (const ns of namespaces) {
    if (!existing.has(ns)) continue;
    const result = await runProcess(systemTool("ip"), ["netns", "delete", ns]);
    if (result.exitCode !== 0) failures.push(`${ns}: ${result.stderr.trim()}`);
  }
  if (failures.length > 0) {
    throw new NetLabError("CLEANUP_FAILED", `could not delete namespaces: ${failures.join("; ")}`);
  }
}

/** Kills the processes in, then deletes, the namespaces; collects every failure into one error. */
export async function removeNamespaces(namespaces: readonly string[]): Promise<void> {
  const errors: unknown[] = [];
  await killNamespaceProcesses(namespaces).catch((error: unknown) => errors.push(error));
  await deleteNamespaces(namespaces).catch((error: unknown) => errors.push(error));
  if (errors.length > 0) {
    const messages = errors.map((error) => (error instanceof Error ? error.message : String(error)));
    throw new NetLabError("CLEANUP_FAILED", messages.join("; "), { cause: errors[0] });
  }
}
