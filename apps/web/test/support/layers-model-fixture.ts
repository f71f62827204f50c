import * as tf from "@tensorflow/tfjs";
import {
  canonicalJson,
  elementCount,
  parseExperimentConfig,
  type ExperimentConfigInput,
  type ModelTensor,
} from "@barnraise/protocol";
import { serializeTrainingState } from "../../../../packages/swarm/src/state/state-snapshot.ts";
import { readStoredModel, storeLayersModel, type StoredModel } from "../../src/server/models/model-store.ts";
import { saveModelFiles } from "./layers-fixture.ts";
import type { TestApp } from "./test-app.ts";

/**
 * A real TF.js Layers model for the checkpoint export tests, saved by TF.js itself and stored as an
 * organizer's upload: a frozen first layer (its weights stay out of checkpoints) and two trainable
 * ones. Also checkpoints (state blobs) of a flat parameter vector, and experiment configs.
 */

export const LAYERS_INPUT = 5;

/** Input 5 → `embed` (frozen, tanh, 6) → `hidden` (relu, 4) → `head` (softmax, 3). */
export function buildLayersModel(): tf.Sequential {
  const model = tf.sequential({ name: "sensor_net" });
  model.add(
    tf.layers.dense({
      name: "embed",
      units: 6,
      inputShape: [LAYERS_INPUT],
      activation: "tanh",
      trainable: false,
    }),
  );
  model.add(tf.layers.dense({ name: "hidden", units: 4, activation: "relu" }));
  model.add(tf.layers.dense({ name: "head", units: 3, activation: "softmax" }));
  // Weights of its own, not the initializers' (biases would be all zero).
  model.setWeights(model.getWeights().map((w, i) => tf.randomUniform(w.shape, -1, 1, "float32", 7 + i)));
  return model;
}

/** Saves `model` as tf.LayersModel.save() does and stores it as an upload: the stored model. */
export async function storeUploadedModel(app: TestApp, model: tf.LayersModel): Promise<StoredModel> {
  const summary = await storeLayersModel(app.ctx.storage, (await saveModelFiles(model)).files);
  return readStoredModel(app.ctx.storage, summary.sha256);
}

/** Replaces an experiment's config (as stored: canonical JSON of the parsed config). */
export async function setExperimentConfig(
  app: TestApp,
  experimentId: string,
  input: ExperimentConfigInput,
): Promise<void> {
  const config = new TextDecoder().decode(canonicalJson(parseExperimentConfig(input)));
  await app.db.experiment.update({ where: { id: experimentId }, data: { config } });
}

/** Distinct, deterministic values for a flat vector of `tensors`. */
export function parameterValues(tensors: readonly ModelTensor[], scale = 1): Float32Array {
  const size = tensors.reduce((sum, tensor) => sum + elementCount(tensor.shape), 0);
  return Float32Array.from({ length: size }, (_, i) => Math.sin(i * 0.7 + 0.3) * scale);
}

/** A state blob of `parameters` with Adam's two slots, as an aux peer uploads it. */
export function checkpointBlob(parameters: Float32Array, step: number): Uint8Array {
  return serializeTrainingState({
    epoch: step,
    parameters,
    optimizer: {
      name: "adam",
      step,
      slots: { m: parameters.map((value) => value * 0.5), v: parameters.map((value) => value * value) },
    },
    generation: 0,
    samples: 1000,
  });
}

/** The named slices of a flat vector. */
export function splitParameters(
  tensors: readonly ModelTensor[],
  parameters: Float32Array,
): Map<string, { shape: readonly number[]; values: Float32Array }> {
  const named = new Map<string, { shape: readonly number[]; values: Float32Array }>();
  let offset = 0;
  for (const { name, shape } of tensors) {
    const length = elementCount(shape);
    named.set(name, { shape, values: parameters.subarray(offset, offset + length) });
    offset += length;
  }
  return named;
}
