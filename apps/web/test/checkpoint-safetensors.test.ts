import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  elementCount,
  layersModelTensors,
  modelTensors,
  parseExperimentConfig,
  type ModelTensor,
} from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serializeTrainingState } from "../../../packages/swarm/src/state/state-snapshot.ts";
import { GET as safetensorsRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/safetensors/route.ts";
import type { CheckpointView } from "../src/api/schemas/public.ts";
import { upload } from "./support/checkpoint-upload.ts";
import {
  buildLayersModel,
  checkpointBlob,
  parameterValues,
  setExperimentConfig,
  storeUploadedModel,
} from "./support/layers-model-fixture.ts";
import { setUpAux, type AuxSetup } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * A checkpoint's weights as safetensors, read back by an independent reader that follows the
 * published format (a few lines of Python with numpy, not our encoder), for a preset and for an
 * uploaded TF.js model (its trainable weights under their TF.js names), and refused for a file that
 * does not hold the experiment's model.
 */

const run = promisify(execFile);

/** Reads a safetensors file the way the format's spec says, and summarizes every tensor as JSON. */
const PYTHON_READER = `
import json, struct, sys
import numpy as np
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]
out = {"metadata": header.pop("__metadata__", {}), "tensors": {}, "bodyBytes": len(body)}
for name, info in header.items():
    assert info["dtype"] == "F32", info
    begin, end = info["data_offsets"]
    array = np.frombuffer(body[begin:end], dtype="<f4").reshape(info["shape"])
    flat = array.reshape(-1)
    out["tensors"][name] = {
        "shape": list(array.shape), "begin": begin,
        "first": float(flat[0]), "last": float(flat[-1]), "sum": float(flat.astype(np.float64).sum()),
    }
print(json.dumps(out))
`;

interface PythonSummary {
  metadata: Record<string, string>;
  bodyBytes: number;
  tensors: Record<string, { shape: number[]; begin: number; first: number; last: number; sum: number }>;
}

describe.each(testDatabaseProviders())("checkpoint as safetensors (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let dir: string;

  beforeAll(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    dir = await mkdtemp(join(tmpdir(), "safetensors-"));
  });
  afterAll(async () => {
    await app.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  async function uploaded(step: number, body: Uint8Array, to: AuxSetup = setup): Promise<CheckpointView> {
    const response = await upload({ node: to.aux, experimentId: to.experimentId, step, body });
    const view = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(view)).toBe(201);
    return view;
  }

  function download(view: CheckpointView, from: AuxSetup = setup): Promise<Response> {
    return callRoute(safetensorsRoute, view.safetensorsUrl, {
      params: { id: from.experimentId, checkpointId: view.id },
    });
  }

  /** Writes a downloaded file and reads it with the Python reader. */
  async function readWithPython(response: Response, name: string): Promise<PythonSummary> {
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(bytes.length).toBe(Number(response.headers.get("content-length")));
    const path = join(dir, name);
    await writeFile(path, bytes);
    // scripts/test.sh names a Python with numpy when the first on PATH has none.
    const python = process.env.BARNRAISE_TEST_PYTHON ?? "python3";
    const { stdout } = await run(python, ["-c", PYTHON_READER, path]);
    return JSON.parse(stdout) as PythonSummary;
  }

  /** Each tensor as read is the slice of `parameters` that its place in `tensors` says. */
  function expectTensors(
    read: PythonSummary,
    tensors: readonly ModelTensor[],
    parameters: Float32Array,
  ): void {
    expect(Object.keys(read.tensors).sort()).toEqual(tensors.map((tensor) => tensor.name).sort());
    let offset = 0;
    for (const { name, shape } of tensors) {
      const values = parameters.subarray(offset, offset + elementCount(shape));
      const seen = read.tensors[name];
      expect(seen, name).toMatchObject({
        shape: [...shape],
        begin: offset * 4,
        first: values[0],
        last: values[values.length - 1],
      });
      expect(seen?.sum ?? NaN).toBeCloseTo(
        values.reduce((sum, value) => sum + value, 0),
        6,
      );
      offset += values.length;
    }
    expect(read.bodyBytes).toBe(offset * 4); // the weights only, no optimizer state
  }

  it("holds every named tensor of the model with the checkpoint's numbers, as Python's reader sees them", async () => {
    const config = parseExperimentConfig({});
    if (config.model.kind !== "mnist-mlp") throw new Error("the default model is mnist-mlp");
    const tensors = modelTensors(config.model);
    const size = tensors.reduce((sum, tensor) => sum + elementCount(tensor.shape), 0);
    const parameters = Float32Array.from({ length: size }, (_, i) => Math.sin(i) * (1 + (i % 7)));
    const slot = (scale: number) => parameters.map((value) => value * scale);
    const blob = serializeTrainingState({
      epoch: 42,
      parameters,
      optimizer: { name: "adam", step: 42, slots: { m: slot(0.5), v: slot(0.25) } },
      generation: 0,
      samples: 10_000,
    });
    const view = await uploaded(42, blob);
    expect(view.safetensorsUrl).toBe(`${view.downloadUrl}/safetensors`);

    const response = await download(view);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-disposition")).toContain(
      `${setup.experimentId}-step-42.safetensors`,
    );
    const read = await readWithPython(response, "weights.safetensors");
    expect(read.metadata).toMatchObject({
      barnraise_experiment: setup.experimentId,
      barnraise_step: "42",
      barnraise_checkpoint_sha256: view.sha256,
    });
    expect(JSON.parse(read.metadata.barnraise_model ?? "null")).toEqual(config.model);
    expectTensors(read, tensors, parameters);
  });

  it("holds an uploaded model's trainable weights under their TF.js names, and not its frozen ones", async () => {
    const stored = await storeUploadedModel(app, buildLayersModel());
    const layers = await setUpAux(app);
    const input = {
      model: { kind: "uploaded" as const, sha256: stored.sha256 },
      dataset: { name: "sensors" },
    };
    await setExperimentConfig(app, layers.experimentId, input);
    const tensors = layersModelTensors(stored.model);
    expect(tensors.map((tensor) => tensor.name)).toEqual([
      "hidden/kernel",
      "hidden/bias",
      "head/kernel",
      "head/bias",
    ]);
    const parameters = parameterValues(tensors, 0.5);
    const view = await uploaded(9, checkpointBlob(parameters, 9), layers);

    const response = await download(view, layers);
    expect(response.status).toBe(200);
    const read = await readWithPython(response, "layers.safetensors");
    expect(read.metadata).toMatchObject({ barnraise_experiment: layers.experimentId, barnraise_step: "9" });
    expect(JSON.parse(read.metadata.barnraise_model ?? "null")).toEqual(parseExperimentConfig(input).model);
    expectTensors(read, tensors, parameters);

    // A checkpoint of the whole model (frozen weights too) is not this run's.
    const whole = parameterValues(stored.model.weights, 0.5);
    const refused = await download(await uploaded(10, checkpointBlob(whole, 10), layers), layers);
    expect(refused.status).toBe(409);
  });

  it("refuses a checkpoint that does not hold this experiment's model", async () => {
    const other = serializeTrainingState({
      epoch: 1,
      parameters: new Float32Array(1000).fill(1),
      optimizer: { name: "sgd", step: 1, slots: { momentum: new Float32Array(1000) } },
    });
    const response = await download(await uploaded(43, other));
    expect(response.status).toBe(409);
    expect(await response.json()).toMatchObject({ error: { code: "CONFLICT" } });
    const garbage = await download(await uploaded(44, new Uint8Array(64).fill(0xff)));
    expect(garbage.status).toBe(409);
  });
});
