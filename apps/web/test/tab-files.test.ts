import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as getTabFile } from "../app/api/v1/tab/[file]/route.ts";
import { sha256, writePrograms } from "./support/programs.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * What a browser tab runs when its volunteer clicks "Contribute from this browser": the worker's
 * bundle (content-addressed, with a Content-Security-Policy of its own) and the wasm binaries, and
 * nothing else from the programs directory.
 */

describe("the tab's files", () => {
  let app: TestApp;
  let programsDir: string;
  const worker = Buffer.from("postMessage('hello');\n");
  const wasm = randomBytes(2048);
  const workerFile = `volunteer-worker-${sha256(worker).slice(0, 12)}.js`;

  beforeAll(async () => {
    programsDir = await mkdtemp(join(tmpdir(), "barnraise-tab-"));
    app = await createTestApp("sqlite", { env: { BARNRAISE_PROGRAMS_DIR: programsDir } });
    await writePrograms(programsDir, [{ name: "barnraise-peer", bytes: randomBytes(100) }], [], {
      worker,
      wasm: [{ name: "tfjs-backend-wasm.wasm", bytes: wasm }],
    });
    await writeFile(join(programsDir, "tab", "notes.txt"), "not served");
  });

  afterAll(async () => {
    await app.dispose();
    await rm(programsDir, { recursive: true, force: true });
  });

  const tabFile = (file: string, headers: Record<string, string> = {}) =>
    callRoute(getTabFile, `/api/v1/tab/${encodeURIComponent(file)}`, { params: { file }, headers });

  it("serves the worker cached for good, with a policy that allows only what it needs", async () => {
    const res = await tabFile(workerFile);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(res.headers.get("cache-control")).toContain("immutable");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(Buffer.from(await res.arrayBuffer()).equals(worker)).toBe(true);
    const policy = res.headers.get("content-security-policy") ?? "";
    expect(policy).toContain("default-src 'none'");
    expect(policy).toContain("script-src 'self' 'wasm-unsafe-eval'");
    expect(policy).toContain("worker-src 'none'");
    // Served over plain HTTP, the swarm's members may be on ws: or wss:.
    expect(policy).toContain("connect-src 'self' ws: wss:");
  });

  it("lets a worker of a platform served over HTTPS open secure WebSockets only", async () => {
    const res = await tabFile(workerFile, {
      "x-forwarded-proto": "https",
      "x-forwarded-host": "train.example.org",
    });
    const policy = res.headers.get("content-security-policy") ?? "";
    expect(policy).toContain("connect-src 'self' wss:");
    expect(policy).not.toMatch(/\bws:/);
  });

  it("serves the wasm binaries, revalidated by their SHA-256, and no other file", async () => {
    const res = await tabFile("tfjs-backend-wasm.wasm");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/wasm");
    expect(res.headers.get("content-security-policy")).toBeNull();
    expect(Buffer.from(await res.arrayBuffer()).equals(wasm)).toBe(true);
    const again = await tabFile("tfjs-backend-wasm.wasm", { "if-none-match": `"${sha256(wasm)}"` });
    expect(again.status).toBe(304);
    for (const file of ["notes.txt", "../manifest.json", "volunteer-worker-000000000000.js"]) {
      expect((await tabFile(file)).status, file).toBe(404);
    }
  });
});
