import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { fetchLayersArtifact } from "../../src/models/fetch-layers-artifact.ts";
import { ModelErrorCode, type ModelError } from "../../src/models/model-error.ts";
import {
  classifierModel,
  FAST_RETRY,
  serveModels,
  storeModel,
  type ModelReply,
  type ModelServer,
  type StoredModel,
} from "./layers-fixture.ts";
import { directoryStore } from "../../src/node/directory-store.ts";

/**
 * Downloading an uploaded model: both files are checked against the signed SHA-256 before anything
 * is built from them, whether they come from the platform or from the peer's cache.
 */

let stored: StoredModel;
let dir: string | undefined;
const servers: ModelServer[] = [];

beforeAll(async () => {
  await tf.setBackend("cpu");
  stored = await storeModel(classifierModel());
});

afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

afterAll(async () => {
  for (const server of servers.splice(0)) await server.close();
});

async function serve(reply?: (file: string, n: number) => ModelReply): Promise<ModelServer> {
  const server = await serveModels([stored], reply === undefined ? {} : { reply });
  servers.push(server);
  return server;
}

async function cacheDir(): Promise<string> {
  dir = await mkdtemp(join(tmpdir(), "barnraise-models-"));
  return dir;
}

function fetchFrom(
  server: ModelServer,
  extra: Partial<Parameters<typeof fetchLayersArtifact>[0]> & { readonly cacheDirectory?: string } = {},
) {
  const { cacheDirectory, ...rest } = extra;
  return fetchLayersArtifact({
    serverUrl: server.url,
    sha256: stored.sha256,
    retry: FAST_RETRY,
    ...(cacheDirectory === undefined ? {} : { cache: directoryStore(cacheDirectory) }),
    ...rest,
  });
}

async function refusal(promise: Promise<unknown>): Promise<ModelError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  if (error === undefined) throw new Error("expected a refusal");
  return error as ModelError;
}

describe("fetchLayersArtifact", () => {
  it("downloads both files and checks them against the signed SHA-256", async () => {
    const server = await serve();
    const lines: string[] = [];
    const artifact = await fetchFrom(server, { log: (line) => lines.push(line) });
    expect(artifact.sha256).toBe(stored.sha256);
    expect(artifact.weightsFile).toBe(stored.weightsFile);
    expect(Buffer.from(artifact.weights).equals(Buffer.from(stored.weights))).toBe(true);
    expect(artifact.model.inputShape).toEqual([4]);
    expect(artifact.model.outputUnits).toBe(3);
    expect(server.requests).toEqual(["model.json", stored.weightsFile]);
    expect(lines.join("\n")).toMatch(/match the signed SHA-256/);
  });

  it("refuses a model.json with one byte changed, before it downloads any weights", async () => {
    const server = await serve((file) => (file === "model.json" ? "tamper" : "ok"));
    const error = await refusal(fetchFrom(server));
    expect(error.code).toBe(ModelErrorCode.MODEL_TAMPERED);
    expect(error.message).toMatch(/differs from the signed SHA-256.*refuses to train it/s);
    expect(server.requests).toEqual(["model.json"]);
  });

  it.each(["tamper", "truncate", "extra"] as const)("refuses weights served with a %s", async (reply) => {
    const server = await serve((file) => (file === stored.weightsFile ? reply : "ok"));
    const error = await refusal(fetchFrom(server));
    expect(error.code).toBe(ModelErrorCode.MODEL_TAMPERED);
    expect(error.message).toContain(stored.weightsFile);
    expect(error.message).toMatch(/refuses to train it/);
  });

  it("says the platform has no such model on a 404, without retrying", async () => {
    const server = await serve();
    const error = await refusal(fetchFrom(server, { sha256: "ab".repeat(32) }));
    expect(error.code).toBe(ModelErrorCode.MODEL_UNAVAILABLE);
    expect(error.message).toMatch(/HTTP 404.*upload the model again/);
    expect(server.requests).toEqual(["model.json"]);
  });

  it("retries a failing server and dropped connections, then succeeds", async () => {
    const server = await serve((file, n) => (n === 1 ? (file === "model.json" ? 503 : "destroy") : "ok"));
    const artifact = await fetchFrom(server);
    expect(artifact.sha256).toBe(stored.sha256);
    expect(server.requests).toEqual(["model.json", "model.json", stored.weightsFile, stored.weightsFile]);
  });

  it("gives up after the retry policy's attempts with MODEL_UNAVAILABLE", async () => {
    const server = await serve(() => 500);
    const error = await refusal(fetchFrom(server));
    expect(error.code).toBe(ModelErrorCode.MODEL_UNAVAILABLE);
    expect(error.message).toMatch(/after 3 attempts.*HTTP 500/);
  });

  it("stops at once when the signal aborts", async () => {
    const server = await serve();
    const controller = new AbortController();
    controller.abort(new Error("stopped by the volunteer"));
    await expect(fetchFrom(server, { signal: controller.signal })).rejects.toThrow(
      "stopped by the volunteer",
    );
    expect(server.requests).toEqual([]);
  });

  it("keeps the verified files in the cache and reads them there next time", async () => {
    const cacheDirectory = await cacheDir();
    const server = await serve();
    await fetchFrom(server, { cacheDirectory });
    expect(await readdir(join(cacheDirectory, stored.sha256))).toEqual(
      ["model.json", stored.weightsFile].sort(),
    );
    const lines: string[] = [];
    const again = await fetchFrom(server, { cacheDirectory, log: (line) => lines.push(line) });
    expect(Buffer.from(again.weights).equals(Buffer.from(stored.weights))).toBe(true);
    expect(server.requests).toHaveLength(2);
    expect(lines.join("\n")).toMatch(/verified copy/);
  });

  it.each(["model.json", "weights"] as const)("downloads a tampered cached %s again", async (which) => {
    const cacheDirectory = await cacheDir();
    const server = await serve();
    await fetchFrom(server, { cacheDirectory });
    const path = join(
      cacheDirectory,
      stored.sha256,
      which === "model.json" ? "model.json" : stored.weightsFile,
    );
    const bytes = await readFile(path);
    bytes[bytes.length >> 1] = ((bytes[bytes.length >> 1] ?? 0) + 1) % 256;
    await writeFile(path, bytes);

    const warnings: string[] = [];
    const artifact = await fetchFrom(server, { cacheDirectory, warn: (message) => warnings.push(message) });
    expect(Buffer.from(artifact.weights).equals(Buffer.from(stored.weights))).toBe(true);
    expect(warnings.join("\n")).toMatch(/does not verify; downloading it again/);
    const refetched = which === "model.json" ? "model.json" : stored.weightsFile;
    expect(server.requests.slice(2)).toEqual([refetched]);
    // The cache holds the good bytes again.
    const repaired = await readFile(path);
    expect(repaired.equals(Buffer.from(which === "model.json" ? stored.modelJson : stored.weights))).toBe(
      true,
    );
  });

  it("does not trust a cache whose files were replaced by another model's", async () => {
    const cacheDirectory = await cacheDir();
    const other = await storeModel(classifierModel({ hidden: "tanh" }));
    const server = await serve();
    await fetchFrom(server, { cacheDirectory });
    // Another model's model.json under this model's id: valid JSON, wrong bytes.
    await writeFile(join(cacheDirectory, stored.sha256, "model.json"), other.modelJson);
    const artifact = await fetchFrom(server, { cacheDirectory });
    expect(artifact.sha256).toBe(stored.sha256);
    expect(server.requests.slice(2)).toEqual(["model.json"]);
  });
});
