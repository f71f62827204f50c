import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { LocalCheckpointStore } from "../src/server/storage/local-checkpoint-store.ts";

/** Every file under `root`, relative, the staging area included. */
async function filesUnder(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name).slice(root.length + 1))
    .sort();
}

/** The pid of a process that has exited (and been reaped). */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  const pid = child.pid;
  await new Promise((resolve) => child.once("exit", resolve));
  if (pid === undefined) throw new Error("no pid");
  return pid;
}

describe("LocalCheckpointStore", () => {
  let root: string;

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), "barnraise-ckpt-"));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("keeps staged bytes invisible until commit, then serves them under the key", async () => {
    const store = new LocalCheckpointStore(root);
    const staged = await store.stage();
    await staged.write(new Uint8Array([1, 2, 3]));
    await staged.write(new Uint8Array([4, 5]));
    expect(await store.find("demo/a.ckpt")).toBeNull();
    expect((await filesUnder(root)).every((file) => file.startsWith(".staging/"))).toBe(true);

    await staged.commit("demo/a.ckpt");
    await staged.discard();
    const stored = await store.find("demo/a.ckpt");
    expect(stored?.size).toBe(5);
    expect(new Uint8Array(await readFile(stored?.path ?? ""))).toEqual(new Uint8Array([1, 2, 3, 4, 5]));
    expect(await filesUnder(root)).toEqual(["demo/a.ckpt"]);

    await store.remove("demo/a.ckpt");
    expect(await store.find("demo/a.ckpt")).toBeNull();
    expect(await filesUnder(root)).toEqual([]);
  });

  it("drops discarded uploads", async () => {
    const store = new LocalCheckpointStore(root);
    const staged = await store.stage();
    await staged.write(new Uint8Array(1000));
    await staged.discard();
    await staged.discard();
    expect(await filesUnder(root)).toEqual([]);
  });

  it("refuses keys that are not storage keys", async () => {
    const store = new LocalCheckpointStore(root);
    await writeFile(join(root, "secret.ckpt"), "x");
    for (const key of [
      "../secret.ckpt",
      "secret.ckpt",
      "demo/../../secret.ckpt",
      "demo/a.txt",
      "/etc/passwd",
    ]) {
      expect(await store.find(key), key).toBeNull();
    }
    const staged = await store.stage();
    await expect(staged.commit("../escape.ckpt")).rejects.toThrow(/not a checkpoint storage key/);
    await staged.discard();
    expect(await filesUnder(root)).toEqual(["secret.ckpt"]);
  });

  it("sweeps staging files of dead processes and of this pid when opened, not those of live processes", async () => {
    new LocalCheckpointStore(root);
    const staging = join(root, ".staging");
    const dead = `${await deadPid()}-abandoned.part`;
    const former = `${process.pid}-former-incarnation.part`;
    const live = `${process.ppid}-in-progress.part`;
    for (const name of [dead, former, live, "junk"]) await writeFile(join(staging, name), "partial");

    new LocalCheckpointStore(root);
    expect(await readdir(staging)).toEqual([live]);
  });
});
