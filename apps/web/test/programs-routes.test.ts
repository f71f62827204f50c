import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as getCatalog } from "../app/api/v1/programs/route.ts";
import { GET as getProgram } from "../app/api/v1/programs/[file]/route.ts";
import { GET as getInstallScript } from "../app/api/v1/programs/install.sh/route.ts";
import { shellQuote } from "../src/server/programs/install-script.ts";
import { packEchoProgram, sha256, writePrograms } from "./support/programs.ts";
import { callRoute, createTestApp, TEST_ORIGIN, type TestApp } from "./support/test-app.ts";

/**
 * The programs the platform serves (scripts/build-programs.ts writes them): the catalog, the
 * tarballs by content-addressed name and by stable alias, and the install script, which is run
 * here for real with `sh` against the platform served over HTTP.
 */

const run = promisify(execFile);

interface ErrorJson {
  error: { code: string; message: string };
}

interface Catalog {
  protocolVersion: number;
  programs: { name: string; version: string; file: string; url: string; bytes: number; sha256: string }[];
  installScript: string;
  addons: {
    platform: string;
    files: { name: string; file: string; url: string; bytes: number; sha256: string }[];
  }[];
}

describe("program routes", () => {
  let app: TestApp;
  let programsDir: string;
  let peer: Buffer;
  const dawn = randomBytes(4096);
  let peerFile = "";

  beforeAll(async () => {
    programsDir = await mkdtemp(join(tmpdir(), "barnraise-programs-"));
    app = await createTestApp("sqlite", { env: { BARNRAISE_PROGRAMS_DIR: programsDir } });
  });

  afterAll(async () => {
    await app.dispose();
    await rm(programsDir, { recursive: true, force: true });
  });

  const program = (file: string, headers: Record<string, string> = {}) =>
    callRoute(getProgram, `/api/v1/programs/${encodeURIComponent(file)}`, { params: { file }, headers });

  describe("before the programs are built", () => {
    it("answers 503 PROGRAMS_NOT_BUILT telling the operator what to run", async () => {
      for (const res of [
        await callRoute(getCatalog, "/api/v1/programs"),
        await program("barnraise-peer.tgz"),
        await callRoute(getInstallScript, "/api/v1/programs/install.sh"),
      ]) {
        expect(res.status).toBe(503);
        const body = (await res.json()) as ErrorJson;
        expect(body.error.code).toBe("PROGRAMS_NOT_BUILT");
        expect(body.error.message).toContain("npm run build -w @barnraise/web");
      }
    });
  });

  describe("once built", () => {
    beforeAll(async () => {
      peer = await packEchoProgram();
      const files = await writePrograms(
        programsDir,
        [
          { name: "barnraise-peer", bytes: peer },
          { name: "barnraise-aux", bytes: randomBytes(3000) },
        ],
        [
          { platform: "linux-x64", files: [{ name: "dawn.node", bytes: dawn }] },
          {
            platform: "win32-x64",
            files: [
              { name: "dawn.node", bytes: randomBytes(100) },
              { name: "dxcompiler.dll", bytes: randomBytes(50) },
            ],
          },
        ],
      );
      peerFile = files[0] ?? "";
      await writeFile(join(programsDir, "secret.txt"), "not served");
    });

    it("lists each program with its URL under the request's origin, size and SHA-256", async () => {
      const res = await callRoute(getCatalog, "/api/v1/programs");
      expect(res.status).toBe(200);
      const catalog = (await res.json()) as Catalog;
      expect(catalog.protocolVersion).toBe(1);
      expect(catalog.installScript).toBe(`${TEST_ORIGIN}/api/v1/programs/install.sh`);
      const listed = catalog.programs.find((p) => p.name === "barnraise-peer");
      expect(listed).toEqual({
        name: "barnraise-peer",
        version: "0.1.0",
        file: peerFile,
        url: `${TEST_ORIGIN}/api/v1/programs/${peerFile}`,
        bytes: peer.length,
        sha256: sha256(peer),
      });
      expect(catalog.programs.map((p) => p.name).sort()).toEqual(["barnraise-aux", "barnraise-peer"]);
    });

    it("serves a tarball by its content-addressed name, cached for good, and by its stable alias", async () => {
      const pinned = await program(peerFile);
      expect(pinned.status).toBe(200);
      expect(pinned.headers.get("cache-control")).toContain("immutable");
      expect(pinned.headers.get("etag")).toBe(`"${sha256(peer)}"`);
      expect(Buffer.from(await pinned.arrayBuffer()).equals(peer)).toBe(true);

      const alias = await program("barnraise-peer.tgz");
      expect(alias.status).toBe(200);
      expect(alias.headers.get("cache-control")).toBe("no-cache");
      expect(Buffer.from(await alias.arrayBuffer()).equals(peer)).toBe(true);

      const revalidated = await program("barnraise-peer.tgz", { "if-none-match": `"${sha256(peer)}"` });
      expect(revalidated.status).toBe(304);
    });

    it("lists the WebGPU add-on's files per platform and serves each by its content-addressed name", async () => {
      const catalog = (await (await callRoute(getCatalog, "/api/v1/programs")).json()) as Catalog;
      expect(catalog.addons.map((addon) => addon.platform)).toEqual(["linux-x64", "win32-x64"]);
      const [linux, windows] = catalog.addons;
      expect(windows?.files.map((file) => file.name)).toEqual(["dawn.node", "dxcompiler.dll"]);
      const file = linux?.files[0];
      expect(file).toEqual({
        name: "dawn.node",
        file: `webgpu-0.6.2-linux-x64-${sha256(dawn).slice(0, 12)}-dawn.node`,
        url: `${TEST_ORIGIN}/api/v1/programs/webgpu-0.6.2-linux-x64-${sha256(dawn).slice(0, 12)}-dawn.node`,
        bytes: dawn.length,
        sha256: sha256(dawn),
      });
      const served = await program(file?.file ?? "");
      expect(served.status).toBe(200);
      expect(served.headers.get("content-type")).toBe("application/octet-stream");
      expect(served.headers.get("cache-control")).toContain("immutable");
      expect(served.headers.get("etag")).toBe(`"${sha256(dawn)}"`);
      expect(Buffer.from(await served.arrayBuffer()).equals(dawn)).toBe(true);
      // Only by the exact name: no alias, no other directory.
      for (const name of [
        "dawn.node",
        `addons/${file?.file ?? ""}`,
        `webgpu-0.6.2-linux-x64-000000000000-dawn.node`,
      ]) {
        expect((await program(name)).status, name).toBe(404);
      }
    });

    it("serves no file the manifest does not name", async () => {
      for (const name of [
        "manifest.json",
        "secret.txt",
        "../manifest.json",
        "barnraise-peer-0.1.0-000000000000.tgz",
      ]) {
        const res = await program(name);
        expect(res.status, name).toBe(404);
        expect(((await res.json()) as ErrorJson).error.code).toBe("NOT_FOUND");
      }
    });

    it("serves an install script that parses and names this platform and each tarball's SHA-256", async () => {
      const res = await callRoute(getInstallScript, "/api/v1/programs/install.sh");
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain("text/x-shellscript");
      expect(res.headers.get("cache-control")).toBe("no-store");
      const script = await res.text();
      expect(script).toContain(`platform=${shellQuote(TEST_ORIGIN)}`);
      expect(script).toContain(sha256(peer));
      const dir = await mkdtemp(join(tmpdir(), "barnraise-install-"));
      await writeFile(join(dir, "install.sh"), script);
      await run("sh", ["-n", join(dir, "install.sh")]);
      // An unknown program is a usage error, before anything is downloaded.
      const wrong = await run("sh", [join(dir, "install.sh"), "barnraise-nope"]).catch(
        (error: unknown) => error,
      );
      expect(wrong).toMatchObject({ code: 64, stderr: expect.stringContaining("usage:") as unknown });
    });
  });
});

describe("shellQuote", () => {
  it("quotes any text, quotes included, as one word the shell reads back unchanged", async () => {
    for (const text of ["http://localhost:3000", "it's", "a'; rm -rf / #", '$(id) `id` \\ "x"']) {
      const { stdout } = await run("sh", ["-c", `printf %s ${shellQuote(text)}`]);
      expect(stdout).toBe(text);
    }
  });
});
