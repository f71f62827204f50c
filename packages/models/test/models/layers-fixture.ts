import { createHash } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import * as tf from "@tensorflow/tfjs";
import {
  canonicalLayersModelJson,
  layersWeightsFileName,
  parseLayersModelJson,
  type UploadedModelConfig,
  parseExperimentConfig,
} from "@barnraise/protocol";

/**
 * Uploaded-model fixtures: small Layers models made and saved by TF.js itself, turned into the
 * platform's stored form (canonical model.json + one weights file named by its hash), and a real
 * node:http server on 127.0.0.1 that serves them at the platform's model routes, with scripted
 * misbehaviour.
 */

/** A stored model: what `GET /api/v1/models/{sha256}/…` serves. */
export interface StoredModel {
  readonly sha256: string;
  readonly modelJson: Uint8Array;
  readonly weightsFile: string;
  readonly weights: Uint8Array;
}

export function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Saves `model` with TF.js's own `save()` and stores it as the platform does; disposes `model`. */
export async function storeModel(model: tf.LayersModel): Promise<StoredModel> {
  let saved: tf.io.ModelArtifacts | undefined;
  await model.save(
    tf.io.withSaveHandler((artifacts) => {
      saved = artifacts;
      return Promise.resolve({ modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } });
    }),
  );
  model.dispose();
  if (saved?.weightData === undefined || saved.weightSpecs === undefined)
    throw new Error("save() gave no weights");
  const weights = new Uint8Array(tf.io.CompositeArrayBuffer.join(saved.weightData));
  const uploaded = new TextEncoder().encode(
    JSON.stringify({
      format: saved.format,
      generatedBy: saved.generatedBy,
      convertedBy: saved.convertedBy,
      modelTopology: saved.modelTopology,
      weightsManifest: [{ paths: ["group1-shard1of1.bin"], weights: saved.weightSpecs }],
    }),
  );
  const weightsSha256 = sha256(weights);
  const modelJson = canonicalLayersModelJson(parseLayersModelJson(uploaded), weightsSha256);
  return { sha256: sha256(modelJson), modelJson, weightsFile: layersWeightsFileName(weightsSha256), weights };
}

/** Seeded initializers, so a fixture has the same weights on every run. */
function dense(
  units: number,
  activation: "relu" | "tanh" | "softmax" | "linear",
  seed: number,
  inputShape?: number[],
) {
  return tf.layers.dense({
    units,
    activation,
    kernelInitializer: tf.initializers.glorotUniform({ seed }),
    biasInitializer: tf.initializers.randomUniform({ minval: -0.1, maxval: 0.1, seed: seed + 1 }),
    ...(inputShape === undefined ? {} : { inputShape }),
  });
}

/** 4 → 8 → 3: a classifier of 4 features into 3 classes (softmax, or linear logits). */
export function classifierModel(
  options: { hidden?: "relu" | "tanh"; output?: "softmax" | "linear"; dropout?: number } = {},
): tf.LayersModel {
  const model = tf.sequential();
  model.add(dense(8, options.hidden ?? "relu", 1, [4]));
  if (options.dropout !== undefined) model.add(tf.layers.dropout({ rate: options.dropout }));
  model.add(dense(3, options.output ?? "softmax", 3));
  return model;
}

/** 3 → 6 tanh → 1 linear: a regression on 3 features. */
export function regressionModel(): tf.LayersModel {
  const model = tf.sequential();
  model.add(dense(6, "tanh", 5, [3]));
  model.add(dense(1, "linear", 7));
  return model;
}

/** The config of an uploaded model. */
export function layersConfig(
  sha: string,
  model: Partial<Omit<UploadedModelConfig, "kind" | "sha256">> = {},
  dataset = "tabular-test",
): ReturnType<typeof parseExperimentConfig> {
  return parseExperimentConfig({
    model: { kind: "uploaded", sha256: sha, ...model },
    dataset: { name: dataset },
  });
}

/** What the server does with one request: serve it, fail with a status, or serve altered bytes. */
export type ModelReply = "ok" | number | "destroy" | "tamper" | "truncate" | "extra";

export interface ModelServer {
  readonly url: string;
  /** Files requested so far, in order (`model.json` or the weights file), as `<sha256 prefix>/<file>`. */
  readonly requests: string[];
  close(): Promise<void>;
}

/**
 * Serves `models` at `/api/v1/models/{sha256}/model.json` and `…/{weights file}`; `reply(file, n)`
 * picks the behaviour of the n-th request (1-based) for `file`.
 */
export async function serveModels(
  models: readonly StoredModel[],
  options: { reply?: (file: string, n: number) => ModelReply } = {},
): Promise<ModelServer> {
  const files = new Map<string, Uint8Array>();
  for (const model of models) {
    files.set(`${model.sha256}/model.json`, model.modelJson);
    files.set(`${model.sha256}/${model.weightsFile}`, model.weights);
  }
  const requests: string[] = [];
  const counts = new Map<string, number>();
  const prefix = "/api/v1/models/";
  const server = createServer((request, response) => {
    const path = (request.url ?? "").startsWith(prefix) ? (request.url ?? "").slice(prefix.length) : "";
    const file = path.split("/")[1] ?? "";
    requests.push(file);
    const n = (counts.get(file) ?? 0) + 1;
    counts.set(file, n);
    const reply = options.reply?.(file, n) ?? "ok";
    if (reply === "destroy") {
      request.socket.destroy();
      return;
    }
    if (typeof reply === "number") {
      response.writeHead(reply, { "content-type": "application/json" }).end('{"error":"scripted"}');
      return;
    }
    const bytes = files.get(path);
    if (bytes === undefined) {
      response.writeHead(404, { "content-type": "application/json" }).end('{"error":"not found"}');
      return;
    }
    let body = Buffer.from(bytes);
    if (reply === "tamper") body[body.length >> 1] = ((body[body.length >> 1] ?? 0) + 1) % 256;
    if (reply === "truncate") body = body.subarray(0, body.length - 4);
    if (reply === "extra") body = Buffer.concat([body, Buffer.from([1, 2, 3, 4])]);
    response.writeHead(200, { "content-type": "application/octet-stream" }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/** A retry policy that does not keep a test waiting. */
export const FAST_RETRY = { attempts: 3, baseDelayMs: 1, maxDelayMs: 2 } as const;
