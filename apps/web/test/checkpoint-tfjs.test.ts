import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import * as tf from "@tensorflow/tfjs";
import {
  elementCount,
  layersModelTensors,
  modelTensors,
  parseExperimentConfig,
  type ExperimentConfigInput,
} from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as listRoute } from "../app/api/v1/experiments/[id]/checkpoints/route.ts";
import { GET as modelJsonRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/tfjs/model.json/route.ts";
import { GET as weightsRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/tfjs/weights.bin/route.ts";
import type { CheckpointList, CheckpointView } from "../src/api/schemas/public.ts";
import { upload } from "./support/checkpoint-upload.ts";
import {
  buildLayersModel,
  checkpointBlob,
  LAYERS_INPUT,
  parameterValues,
  setExperimentConfig,
  splitParameters,
  storeUploadedModel,
} from "./support/layers-model-fixture.ts";
import { setUpAux, type AuxSetup } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Checkpoints as TF.js Layers models: model.json and weights.bin fetched by TF.js itself
 * (`tf.loadLayersModel` over HTTP from a server that runs the routes), whose predictions are those
 * of the checkpoint's parameters: a forward pass written here for mnist-mlp, the uploaded model with
 * its trainable weights replaced for an uploaded model (its frozen layer kept from the upload). An
 * ALBERT run has no TF.js form.
 */

type Handler = (
  req: Request,
  context: { params: Promise<{ id: string; checkpointId: string }> },
) => Promise<Response>;

const ROUTES: Record<string, Handler> = { "model.json": modelJsonRoute, "weights.bin": weightsRoute };
const TFJS_PATH = /^\/api\/v1\/experiments\/([^/]+)\/checkpoints\/([^/]+)\/tfjs\/([^/]+)$/;

/** A real HTTP server that runs the two TF.js routes, as Next would: what `tf.io.http` fetches from. */
async function serveTfjsRoutes(): Promise<{ server: Server; origin: string }> {
  const server = createServer((incoming, outgoing) => {
    void (async () => {
      const url = new URL(incoming.url ?? "/", "http://localhost");
      const match = TFJS_PATH.exec(url.pathname);
      const handler = match === null ? undefined : ROUTES[match[3] ?? ""];
      if (match === null || handler === undefined) {
        outgoing.writeHead(404).end();
        return;
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(incoming.headers)) {
        if (typeof value === "string") headers.set(name, value);
      }
      const response = await handler(new Request(url, { method: incoming.method ?? "GET", headers }), {
        params: Promise.resolve({
          id: decodeURIComponent(match[1] ?? ""),
          checkpointId: decodeURIComponent(match[2] ?? ""),
        }),
      });
      outgoing.writeHead(response.status, Object.fromEntries(response.headers));
      outgoing.end(Buffer.from(await response.arrayBuffer()));
    })().catch((error: unknown) => {
      outgoing.writeHead(500).end(String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);
const ACTIVATIONS = {
  relu: (x: number) => Math.max(0, x),
  tanh: Math.tanh,
  // The peers' GELU: the tanh approximation.
  gelu: (x: number) => 0.5 * x * (1 + Math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))),
};

/** The mnist-mlp's logits for one image, computed from the flat vector in float64. */
function mnistForward(
  parameters: Float32Array,
  hiddenUnits: readonly number[],
  activation: keyof typeof ACTIVATIONS,
  input: Float32Array,
): number[] {
  const widths = [784, ...hiddenUnits, 10];
  let x = Array.from(input);
  let offset = 0;
  for (let layer = 0; layer + 1 < widths.length; layer++) {
    const rows = widths[layer] ?? 0;
    const columns = widths[layer + 1] ?? 0;
    const kernel = parameters.subarray(offset, offset + rows * columns);
    const bias = parameters.subarray(offset + rows * columns, offset + rows * columns + columns);
    offset += rows * columns + columns;
    const last = layer + 2 === widths.length;
    x = Array.from({ length: columns }, (_, j) => {
      let sum = bias[j] ?? 0;
      for (let i = 0; i < rows; i++) sum += (x[i] ?? 0) * (kernel[i * columns + j] ?? 0);
      return last ? sum : ACTIVATIONS[activation](sum);
    });
  }
  expect(offset).toBe(parameters.length);
  return x;
}

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance = 1e-4): void {
  expect(actual.length).toBe(expected.length);
  const worst = Array.from(actual).reduce(
    (max, value, i) => Math.max(max, Math.abs(value - (expected[i] ?? NaN))),
    0,
  );
  expect(worst).toBeLessThanOrEqual(tolerance);
}

describe.each(testDatabaseProviders())("checkpoint as a TF.js model (%s)", (provider) => {
  let app: TestApp;
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    await tf.setBackend("cpu");
    app = await createTestApp(provider);
    ({ server, origin } = await serveTfjsRoutes());
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    await app.dispose();
  });

  /** A fresh experiment with `config` and its aux peer. */
  async function experiment(config: ExperimentConfigInput): Promise<AuxSetup> {
    const setup = await setUpAux(app);
    await setExperimentConfig(app, setup.experimentId, config);
    return setup;
  }

  async function uploaded(setup: AuxSetup, step: number, body: Uint8Array): Promise<CheckpointView> {
    const response = await upload({ node: setup.aux, experimentId: setup.experimentId, step, body });
    const view = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(view)).toBe(201);
    return view;
  }

  function get(
    route: Handler,
    setup: AuxSetup,
    view: CheckpointView,
    file: string,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    return callRoute(route, `${view.downloadUrl}/tfjs/${file}`, {
      params: { id: setup.experimentId, checkpointId: view.id },
      headers,
    });
  }

  it.each([
    { hiddenUnits: [128, 64], activation: "relu" as const },
    { hiddenUnits: [24], activation: "gelu" as const },
    { hiddenUnits: [16, 12, 8], activation: "tanh" as const },
  ])(
    "loads an mnist-mlp ($activation, $hiddenUnits) that predicts the checkpoint's logits",
    async (model) => {
      const config = { model: { kind: "mnist-mlp" as const, ...model } };
      const setup = await experiment(config);
      const tensors = modelTensors(parseExperimentConfig(config).model as Parameters<typeof modelTensors>[0]);
      const parameters = parameterValues(tensors, 0.08);
      const view = await uploaded(setup, 10, checkpointBlob(parameters, 10));
      expect(view.tfjsUrl).toBe(`${view.downloadUrl}/tfjs/model.json`);

      const json = await get(modelJsonRoute, setup, view, "model.json");
      expect(json.status).toBe(200);
      expect(json.headers.get("content-type")).toBe("application/json");
      expect(json.headers.get("cache-control")).toContain("immutable");
      expect(json.headers.get("access-control-allow-origin")).toBe("*");
      const etag = json.headers.get("etag") ?? "";
      expect(etag).toContain(view.sha256);
      const modelJson = (await json.json()) as {
        format: string;
        modelTopology: {
          class_name: string;
          config: { layers: { class_name: string; config: Record<string, unknown> }[] };
        };
        weightsManifest: { paths: string[]; weights: { name: string; shape: number[]; dtype: string }[] }[];
      };
      expect(modelJson.format).toBe("layers-model");
      // A Sequential; with GELU a functional model that spells the tanh approximation out.
      expect(modelJson.modelTopology.class_name).toBe(model.activation === "gelu" ? "Model" : "Sequential");
      const dense = modelJson.modelTopology.config.layers.filter((layer) => layer.class_name === "Dense");
      expect(dense.map((layer) => layer.config.name)).toEqual([
        ...model.hiddenUnits.map((_, i) => `hidden${i}`),
        "output",
      ]);
      expect(dense.map((layer) => layer.config.activation)).toEqual([
        ...model.hiddenUnits.map(() => (model.activation === "gelu" ? "linear" : model.activation)),
        "linear",
      ]);
      expect(modelJson.weightsManifest).toEqual([
        {
          paths: ["weights.bin"],
          weights: tensors.map(({ name, shape }) => ({
            name: name.replace(".", "/"),
            shape: [...shape],
            dtype: "float32",
          })),
        },
      ]);
      const notModified = await get(modelJsonRoute, setup, view, "model.json", { "if-none-match": etag });
      expect(notModified.status).toBe(304);

      // weights.bin: exactly the parameters, no optimizer state; ranges and ETag as for any file.
      const weights = await get(weightsRoute, setup, view, "weights.bin");
      expect(weights.status).toBe(200);
      const bytes = new Uint8Array(await weights.arrayBuffer());
      expect(bytes).toEqual(new Uint8Array(parameters.buffer));
      expect(Number(weights.headers.get("content-length"))).toBe(bytes.length);
      const last = Math.min(70_000, bytes.length - 5);
      const range = await get(weightsRoute, setup, view, "weights.bin", { range: `bytes=100-${last}` });
      expect(range.status).toBe(206);
      expect(range.headers.get("content-range")).toBe(`bytes 100-${last}/${bytes.length}`);
      expect(new Uint8Array(await range.arrayBuffer())).toEqual(bytes.subarray(100, last + 1));
      const beyond = await get(weightsRoute, setup, view, "weights.bin", { range: `bytes=${bytes.length}-` });
      expect(beyond.status).toBe(416);
      const weightsEtag = weights.headers.get("etag") ?? "";
      expect(weightsEtag).toContain(view.sha256);
      expect(
        (await get(weightsRoute, setup, view, "weights.bin", { "if-none-match": weightsEtag })).status,
      ).toBe(304);

      // TF.js fetches model.json and then weights.bin beside it.
      const loaded = await tf.loadLayersModel(`${origin}${view.tfjsUrl}`);
      const images = Array.from({ length: 3 }, (_, n) =>
        Float32Array.from({ length: 784 }, (_, i) => ((i * 31 + n * 17) % 256) / 255),
      );
      const logits = loaded.predict(tf.tensor2d(images.map((image) => Array.from(image)))) as tf.Tensor2D;
      const predicted = await logits.array();
      images.forEach((image, n) => {
        expectClose(predicted[n] ?? [], mnistForward(parameters, model.hiddenUnits, model.activation, image));
      });
      loaded.dispose();
    },
  );

  it("loads an uploaded model with the checkpoint's trainable weights and the upload's frozen ones", async () => {
    const original = buildLayersModel();
    const stored = await storeUploadedModel(app, original);
    const setup = await experiment({
      model: { kind: "uploaded", sha256: stored.sha256 },
      dataset: { name: "sensors" },
    });
    const tensors = layersModelTensors(stored.model);
    expect(tensors.map((tensor) => tensor.name)).toEqual([
      "hidden/kernel",
      "hidden/bias",
      "head/kernel",
      "head/bias",
    ]);
    const parameters = parameterValues(tensors, 0.9);
    const view = await uploaded(setup, 5, checkpointBlob(parameters, 5));
    expect(view.tfjsUrl).toBe(`${view.downloadUrl}/tfjs/model.json`);

    // model.json: the uploaded topology, every weight (the frozen ones too) in weights.bin.
    const json = await get(modelJsonRoute, setup, view, "model.json");
    expect(json.status).toBe(200);
    const modelJson = (await json.json()) as { modelTopology: unknown; weightsManifest: unknown };
    expect(modelJson.modelTopology).toEqual(stored.model.modelTopology);
    expect(modelJson.weightsManifest).toEqual([
      {
        paths: ["weights.bin"],
        weights: stored.model.weights.map(({ name, shape }) => ({
          name,
          shape: [...shape],
          dtype: "float32",
        })),
      },
    ]);
    // weights.bin: manifest order, trainable weights from the checkpoint, frozen from the upload.
    const uploadedWeights = original.weights.map((w) => ({
      name: w.originalName,
      values: w.read().dataSync(),
    }));
    const fromCheckpoint = splitParameters(tensors, parameters);
    const expected = stored.model.weights.flatMap(({ name, trainable }) => {
      const values = trainable
        ? fromCheckpoint.get(name)?.values
        : uploadedWeights.find((w) => w.name === name)?.values;
      if (values === undefined) throw new Error(`no values for ${name}`);
      return Array.from(values);
    });
    const weights = await get(weightsRoute, setup, view, "weights.bin");
    expect(weights.status).toBe(200);
    expect(new Uint8Array(await weights.arrayBuffer())).toEqual(
      new Uint8Array(Float32Array.from(expected).buffer),
    );
    // A range across the seam of the two files.
    const embedBytes = stored.model.weights
      .filter((w) => !w.trainable)
      .reduce((sum, w) => sum + elementCount(w.shape) * 4, 0);
    const seam = await get(weightsRoute, setup, view, "weights.bin", {
      range: `bytes=${embedBytes - 8}-${embedBytes + 7}`,
    });
    expect(seam.status).toBe(206);
    expect(new Uint8Array(await seam.arrayBuffer())).toEqual(
      new Uint8Array(Float32Array.from(expected).buffer).subarray(embedBytes - 8, embedBytes + 8),
    );

    const loaded = await tf.loadLayersModel(`${origin}${view.tfjsUrl}`);
    // The frozen layer is the upload's, and still frozen; the others are the checkpoint's.
    expect(loaded.getLayer("embed").trainable).toBe(false);
    expectClose(
      loaded.getLayer("embed").getWeights()[0]?.dataSync() ?? [],
      original.getLayer("embed").getWeights()[0]?.dataSync() ?? [],
      0,
    );
    expectClose(
      loaded.getLayer("head").getWeights()[0]?.dataSync() ?? [],
      fromCheckpoint.get("head/kernel")?.values ?? [],
      0,
    );
    // The upload with its trainable weights replaced predicts the same.
    original.setWeights(
      original.weights.map((w) => {
        const replaced = fromCheckpoint.get(w.originalName);
        return replaced === undefined ? w.read() : tf.tensor(replaced.values, [...replaced.shape]);
      }),
    );
    const input = tf.randomNormal([8, LAYERS_INPUT], 0, 1, "float32", 3);
    const mine = (await (loaded.predict(input) as tf.Tensor).array()) as number[][];
    const theirs = (await (original.predict(input) as tf.Tensor).array()) as number[][];
    expectClose(mine.flat(), theirs.flat(), 1e-6);
    loaded.dispose();
    original.dispose();
  });

  it("refuses an ALBERT run (no TF.js form) and lists its checkpoints without a TF.js URL", async () => {
    const setup = await experiment({ model: { kind: "albert-mlm" } });
    const view = await uploaded(setup, 3, new Uint8Array(64).fill(1));
    expect(view.tfjsUrl).toBeNull();
    const list = await callRoute(listRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints`, {
      params: { id: setup.experimentId },
    });
    const { checkpoints } = (await list.json()) as CheckpointList;
    expect(checkpoints.map((checkpoint) => checkpoint.tfjsUrl)).toEqual([null]);
    for (const [route, file] of [
      [modelJsonRoute, "model.json"],
      [weightsRoute, "weights.bin"],
    ] as const) {
      const response = await get(route, setup, view, file);
      expect(response.status).toBe(409);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("CONFLICT");
      expect(body.error.message).toMatch(/ALBERT.*no TF\.js Layers equivalent.*safetensors/);
    }
  });

  it("refuses a checkpoint that does not hold the experiment's model, and knows no other", async () => {
    const setup = await experiment({ model: { kind: "mnist-mlp", hiddenUnits: [8] } });
    const other = await uploaded(setup, 1, checkpointBlob(new Float32Array(1000).fill(1), 1));
    expect((await get(modelJsonRoute, setup, other, "model.json")).status).toBe(409);
    expect((await get(weightsRoute, setup, other, "weights.bin")).status).toBe(409);
    const garbage = await uploaded(setup, 2, new Uint8Array(64).fill(0xff));
    expect((await get(weightsRoute, setup, garbage, "weights.bin")).status).toBe(409);
    const missing = await get(modelJsonRoute, setup, { ...other, id: "nope" }, "model.json");
    expect(missing.status).toBe(404);
  });
});
