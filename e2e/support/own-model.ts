import * as tf from "@tensorflow/tfjs";

/**
 * An organizer's own model and data for the stories: a small Keras-style classifier saved with
 * TF.js's own `save` (model.json and weights.bin, as the browser download handler writes them), and
 * a CSV of labelled rows it can learn. The rows are separable by construction: the label is the
 * largest of three fixed linear scores of the features, so a trained model predicts far better than
 * its random initial weights.
 */

export const FEATURES = ["sepal", "petal", "stem", "leaf"] as const;
export const CLASSES = ["red", "green", "blue"] as const;

/** The scoring that labels each row: class k wins when row · W[k] + b[k] is the largest. */
const W = [
  [2, -1, 0.5, 0],
  [-1, 2, 0, 0.5],
  [0.5, 0.5, -2, 1],
];
const B = [0, 0.2, -0.1];

export interface Row {
  readonly features: readonly number[];
  readonly label: number;
}

/** `count` rows from a fixed pseudo-random sequence (the same rows on every run). */
export function labelledRows(count: number): Row[] {
  let state = 12345;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state / 2 ** 32) * 2 - 1;
  };
  return Array.from({ length: count }, () => {
    const features = FEATURES.map(() => Math.round(next() * 1000) / 1000);
    const scores = W.map((weights, k) =>
      weights.reduce((sum, w, i) => sum + w * (features[i] ?? 0), B[k] ?? 0),
    );
    return { features, label: scores.indexOf(Math.max(...scores)) };
  });
}

/** The rows as the CSV an organizer uploads: a header, then the features and the class name. */
export function csvOf(rows: readonly Row[]): string {
  const lines = [[...FEATURES, "colour"].join(",")];
  for (const row of rows) lines.push([...row.features.map(String), CLASSES[row.label]].join(","));
  return `${lines.join("\n")}\n`;
}

/** The rows the platform puts in the test split: data rows 10, 20, … (every 10th). */
export function testRows(rows: readonly Row[]): Row[] {
  return rows.filter((_, index) => (index + 1) % 10 === 0);
}

export interface SavedModel {
  readonly modelJson: Buffer;
  readonly weights: Buffer;
}

/** A 4 → 16 (relu) → 3 (softmax) classifier with TF.js's initial weights, saved by TF.js. */
export async function saveClassifier(): Promise<SavedModel> {
  await tf.setBackend("cpu");
  const model = tf.sequential();
  model.add(tf.layers.dense({ inputShape: [FEATURES.length], units: 16, activation: "relu" }));
  model.add(tf.layers.dense({ units: CLASSES.length, activation: "softmax" }));
  return saveModel(model);
}

/**
 * A next-token language model over `positions` token ids and a vocabulary of `vocabulary` tokens:
 * Embedding (8 per token) → Dense(vocabulary, softmax) at every position, saved by TF.js.
 */
export async function saveLanguageModel(positions: number, vocabulary: number): Promise<SavedModel> {
  await tf.setBackend("cpu");
  const model = tf.sequential();
  model.add(tf.layers.embedding({ inputDim: vocabulary, outputDim: 8, inputLength: positions }));
  model.add(tf.layers.dense({ units: vocabulary, activation: "softmax" }));
  return saveModel(model);
}

/** `model` as TF.js's own `save` writes it (model.json naming weights.bin); disposes `model`. */
async function saveModel(model: tf.LayersModel): Promise<SavedModel> {
  let saved: SavedModel | undefined;
  await model.save(
    tf.io.withSaveHandler(async (artifacts) => {
      const data = artifacts.weightData;
      const weights = Buffer.from(
        data instanceof ArrayBuffer ? data : await new Blob(data as ArrayBuffer[]).arrayBuffer(),
      );
      const json = {
        modelTopology: artifacts.modelTopology,
        format: artifacts.format,
        generatedBy: artifacts.generatedBy,
        convertedBy: artifacts.convertedBy,
        weightsManifest: [{ paths: ["./weights.bin"], weights: artifacts.weightSpecs }],
      };
      saved = { modelJson: Buffer.from(JSON.stringify(json)), weights };
      return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
    }),
  );
  model.dispose();
  if (saved === undefined) throw new Error("TF.js did not save the model");
  return saved;
}

/** Share of `rows` whose class the model predicts. */
export function accuracyOf(model: tf.LayersModel, rows: readonly Row[]): number {
  return tf.tidy(() => {
    const inputs = tf.tensor2d(rows.map((row) => [...row.features]));
    const predicted = (model.predict(inputs) as tf.Tensor).argMax(1).dataSync();
    return rows.filter((row, i) => predicted[i] === row.label).length / rows.length;
  });
}

/** Opens a saved model from memory, as `tf.loadLayersModel` would from its two files. */
export async function loadSaved(saved: SavedModel): Promise<tf.LayersModel> {
  const json = JSON.parse(saved.modelJson.toString("utf8")) as {
    modelTopology: object;
    weightsManifest: { weights: tf.io.WeightsManifestEntry[] }[];
  };
  return tf.loadLayersModel(
    tf.io.fromMemory({
      modelTopology: json.modelTopology,
      weightSpecs: json.weightsManifest.flatMap((group) => group.weights),
      weightData: saved.weights.buffer.slice(
        saved.weights.byteOffset,
        saved.weights.byteOffset + saved.weights.byteLength,
      ),
    }),
  );
}
