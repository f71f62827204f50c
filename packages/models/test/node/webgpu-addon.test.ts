import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { dawnPlatform, fetchDawnAddon } from "../../src/node/webgpu.ts";

/**
 * The served program leaves Dawn's binding out and fetches its platform's files from the platform's
 * catalog (GET /api/v1/programs): checked against the catalog's SHA-256, kept in the data
 * directory, and fetched again only when the kept copy no longer matches.
 */

const sha256 = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex");

let server: Server;
let base: URL;
/** What the server answers: the catalog's add-ons, and the bytes behind each file's path. */
let addons: unknown[] = [];
const files = new Map<string, Uint8Array>();
const requests: string[] = [];
let dir: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    requests.push(req.url ?? "");
    if (req.url === "/api/v1/programs") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ protocolVersion: 1, programs: [], addons }));
      return;
    }
    const body = files.get(req.url ?? "");
    res.statusCode = body === undefined ? 404 : 200;
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-addon-"));
  requests.length = 0;
  files.clear();
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Serves `entries` as the add-on for `platform`; `served` replaces a file's bytes on the wire. */
function serve(
  platform: string,
  entries: Record<string, Uint8Array>,
  served: Record<string, Uint8Array> = {},
) {
  const listed = Object.entries(entries).map(([name, bytes]) => {
    const path = `/api/v1/programs/webgpu-0.6.2-${platform}-${sha256(bytes).slice(0, 12)}-${name}`;
    files.set(path, served[name] ?? bytes);
    return {
      name,
      file: path.split("/").at(-1),
      url: new URL(path, base).href,
      bytes: bytes.length,
      sha256: sha256(bytes),
    };
  });
  addons = [{ name: "webgpu", version: "0.6.2", platform, files: listed }];
}

describe("fetchDawnAddon", () => {
  it("fetches this platform's files into the data directory and names dawn.node's path", async () => {
    const dawn = randomBytes(5000);
    const dll = randomBytes(700);
    serve(dawnPlatform(), { "dawn.node": dawn, "dxcompiler.dll": dll });
    const logged: string[] = [];
    const path = await fetchDawnAddon({ server: base, directory: dir, log: (line) => logged.push(line) });
    expect(path).toBe(join(dir, `webgpu-0.6.2-${dawnPlatform()}-${sha256(dawn).slice(0, 12)}`, "dawn.node"));
    expect(Buffer.compare(await readFile(path), dawn)).toBe(0);
    expect(Buffer.compare(await readFile(join(path, "..", "dxcompiler.dll")), dll)).toBe(0);
    expect(logged).toEqual([
      expect.stringMatching(/^fetching the WebGPU binding for \S+: dawn\.node, 0\.0 MiB$/),
      expect.stringMatching(/dxcompiler\.dll/),
    ]);
  });

  it("uses the kept copy on the next start, and fetches again a copy that was damaged", async () => {
    const dawn = randomBytes(3000);
    serve(dawnPlatform(), { "dawn.node": dawn });
    const path = await fetchDawnAddon({ server: base, directory: dir });
    expect(requests.filter((url) => url.endsWith("dawn.node"))).toHaveLength(1);

    await fetchDawnAddon({ server: base, directory: dir });
    expect(requests.filter((url) => url.endsWith("dawn.node"))).toHaveLength(1);

    await writeFile(path, randomBytes(3000));
    await fetchDawnAddon({ server: base, directory: dir });
    expect(requests.filter((url) => url.endsWith("dawn.node"))).toHaveLength(2);
    expect(Buffer.compare(await readFile(path), dawn)).toBe(0);
  });

  it("refuses bytes that do not match the catalog's SHA-256 and keeps nothing of them", async () => {
    const dawn = randomBytes(3000);
    serve(dawnPlatform(), { "dawn.node": dawn }, { "dawn.node": randomBytes(3000) });
    await expect(fetchDawnAddon({ server: base, directory: dir })).rejects.toThrow(
      /does not match the SHA-256 the platform's catalog gives/,
    );
    const [folder] = await readdir(dir);
    expect(await readdir(join(dir, folder ?? ""))).toEqual([]);

    serve(dawnPlatform(), { "dawn.node": dawn }, { "dawn.node": Buffer.concat([dawn, randomBytes(10)]) });
    await expect(fetchDawnAddon({ server: base, directory: dir })).rejects.toThrow(/does not match/);
  });

  it("says so when the platform serves no binding for this machine", async () => {
    serve("plan9-mips", { "dawn.node": randomBytes(100) });
    await expect(fetchDawnAddon({ server: base, directory: dir })).rejects.toThrow(
      `the platform serves no WebGPU binding for ${dawnPlatform()}`,
    );
    addons = [];
    await expect(fetchDawnAddon({ server: base, directory: dir })).rejects.toThrow(/no WebGPU binding/);
    expect(existsSync(join(dir, "addons"))).toBe(false);
  });

  it("refuses a catalog entry whose file name could leave its directory", async () => {
    serve(dawnPlatform(), { "dawn.node": randomBytes(100) });
    const [entry] = addons as { files: { name: string }[] }[];
    for (const file of entry?.files ?? []) file.name = "../dawn.node";
    await expect(fetchDawnAddon({ server: base, directory: dir })).rejects.toThrow();
    expect(await readdir(dir)).toEqual([]);
  });
});
