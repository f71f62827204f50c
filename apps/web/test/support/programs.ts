import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

/** Built programs for the platform to serve, as scripts/build-programs.ts lays them out. */

const run = promisify(execFile);

export const sha256 = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex");

/**
 * An npm tarball, packed by `npm pack`, whose `barnraise-peer` bin prints `echo-program` and its
 * arguments: a stand-in for the real bundle where a test checks how it is fetched and started.
 */
export async function packEchoProgram(): Promise<Buffer> {
  const directory = await mkdtemp(join(tmpdir(), "barnraise-echo-"));
  try {
    const packageDir = join(directory, "package");
    await mkdir(packageDir);
    const manifest = {
      name: "barnraise-peer",
      version: "0.1.0",
      type: "module",
      bin: { "barnraise-peer": "cli.js" },
    };
    await writeFile(join(packageDir, "package.json"), JSON.stringify(manifest));
    await writeFile(
      join(packageDir, "cli.js"),
      '#!/usr/bin/env node\nprocess.stdout.write(`echo-program ${process.argv.slice(2).join(" ")}\\n`);\n',
      { mode: 0o755 },
    );
    const { stdout } = await run("npm", ["pack", "--silent", "--pack-destination", directory], {
      cwd: packageDir,
    });
    return await readFile(join(directory, stdout.trim().split("\n").at(-1) ?? ""));
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}

export interface BuiltProgram {
  readonly name: "barnraise-peer" | "barnraise-aux";
  readonly bytes: Buffer;
}

/** A native add-on's files for one platform, as build-programs lays them out under `addons/`. */
export interface BuiltAddon {
  readonly platform: string;
  readonly files: readonly { readonly name: string; readonly bytes: Uint8Array }[];
}

/** A browser tab's files, as build-programs lays them out under `tab/`. */
export interface BuiltTab {
  readonly worker: Uint8Array;
  readonly wasm: readonly { readonly name: string; readonly bytes: Uint8Array }[];
}

async function writeTab(directory: string, tab: BuiltTab) {
  await mkdir(directory, { recursive: true });
  const entry = (file: string, bytes: Uint8Array) => ({ file, bytes: bytes.length, sha256: sha256(bytes) });
  const worker = entry(`volunteer-worker-${sha256(tab.worker).slice(0, 12)}.js`, tab.worker);
  await writeFile(join(directory, worker.file), tab.worker);
  const wasm = [];
  for (const { name, bytes } of tab.wasm) {
    await writeFile(join(directory, name), bytes);
    wasm.push(entry(name, bytes));
  }
  return { worker, wasm };
}

/**
 * Writes the tarballs, the add-ons' files and the manifest into `directory`; returns each program's
 * file name.
 */
export async function writePrograms(
  directory: string,
  programs: readonly BuiltProgram[],
  addons: readonly BuiltAddon[] = [],
  tab?: BuiltTab,
): Promise<string[]> {
  const entries = programs.map(({ name, bytes }) => ({
    name,
    version: "0.1.0",
    file: `${name}-0.1.0-${sha256(bytes).slice(0, 12)}.tgz`,
    bytes: bytes.length,
    sha256: sha256(bytes),
  }));
  for (const [index, { bytes }] of programs.entries())
    await writeFile(join(directory, entries[index]?.file ?? ""), bytes);
  await mkdir(join(directory, "addons"), { recursive: true });
  const addonEntries = [];
  for (const addon of addons) {
    const files = [];
    for (const { name, bytes } of addon.files) {
      const file = `webgpu-0.6.2-${addon.platform}-${sha256(bytes).slice(0, 12)}-${name}`;
      await writeFile(join(directory, "addons", file), bytes);
      files.push({ name, file, bytes: bytes.length, sha256: sha256(bytes) });
    }
    addonEntries.push({ name: "webgpu", version: "0.6.2", platform: addon.platform, files });
  }
  const tabEntry = tab === undefined ? undefined : await writeTab(join(directory, "tab"), tab);
  await writeFile(
    join(directory, "manifest.json"),
    JSON.stringify({
      protocolVersion: 1,
      inputsHash: "test",
      programs: entries,
      addons: addonEntries,
      ...(tabEntry === undefined ? {} : { tab: tabEntry }),
    }),
  );
  return entries.map((entry) => entry.file);
}
