import { BuiltInModel, type BuiltInModelConfig } from "./experiment-config.ts";

/** One named parameter tensor of a model kind: what the swarm's flat vector holds, in order. */
export interface ModelTensor {
  readonly name: string;
  /** Row-major dimensions. */
  readonly shape: readonly number[];
}

/** Pixels of one flattened 28 × 28 MNIST digit: the input width of mnist-mlp. */
export const MNIST_IMAGE_PIXELS = 784;
/** The ten digit classes: the output width of mnist-mlp. */
export const MNIST_DIGIT_CLASSES = 10;

/**
 * The parameter tensors of a model preset (an uploaded model's are `layersModelTensors`), in the order of the flat parameter vector every peer
 * averages and every checkpoint stores (each row-major, float32). Peers, checkpoints and exports
 * (safetensors) all name and shape the weights by this one list.
 *
 * mnist-mlp (784 → hiddenUnits… → 10): `hidden0.kernel` [784, h0], `hidden0.bias` [h0],
 * `hidden1.kernel` …, then `output.kernel` [h_last, 10], `output.bias` [10].
 *
 * albert-mlm (V vocabSize, E embeddingSize, H hiddenSize, I intermediateSize, P maxSequenceLength):
 * 1. `embeddings.word` [V, E], `embeddings.position` [P, E], `embeddings.norm.gain|bias` [E],
 *    `embeddings.projection.kernel` [E, H], `.bias` [H] (the factorized embedding);
 * 2. the ONE transformer layer every depth reuses: `layer.attention.{query,key,value,output}.kernel`
 *    [H, H] and `.bias` [H], `layer.attention.norm.gain|bias` [H], `layer.ffn.intermediate.kernel`
 *    [H, I], `.bias` [I], `layer.ffn.output.kernel` [I, H], `.bias` [H], `layer.ffn.norm.gain|bias` [H];
 * 3. the MLM head: `mlm.dense.kernel` [H, E], `.bias` [E], `mlm.norm.gain|bias` [E], and
 *    `mlm.output.bias` [V] (the output projection itself is `embeddings.word`ᵀ, tied).
 * numLayers does not appear: depth reuses the shared layer.
 */
export function modelTensors(model: BuiltInModelConfig): ModelTensor[] {
  const tensors: ModelTensor[] = [];
  const dense = (prefix: string, rows: number, columns: number): void => {
    tensors.push({ name: `${prefix}.kernel`, shape: [rows, columns] });
    tensors.push({ name: `${prefix}.bias`, shape: [columns] });
  };
  if (model.kind === BuiltInModel.mnistMlp) {
    const widths = [MNIST_IMAGE_PIXELS, ...model.hiddenUnits, MNIST_DIGIT_CLASSES];
    for (let i = 0; i + 1 < widths.length; i++) {
      dense(i + 2 === widths.length ? "output" : `hidden${i}`, widths[i] ?? 0, widths[i + 1] ?? 0);
    }
    return tensors;
  }
  const { vocabSize: V, embeddingSize: E, hiddenSize: H, intermediateSize: I, maxSequenceLength: P } = model;
  const norm = (prefix: string, length: number): void => {
    tensors.push({ name: `${prefix}.gain`, shape: [length] });
    tensors.push({ name: `${prefix}.bias`, shape: [length] });
  };
  tensors.push({ name: "embeddings.word", shape: [V, E] });
  tensors.push({ name: "embeddings.position", shape: [P, E] });
  norm("embeddings.norm", E);
  dense("embeddings.projection", E, H);
  for (const part of ["query", "key", "value", "output"]) dense(`layer.attention.${part}`, H, H);
  norm("layer.attention.norm", H);
  dense("layer.ffn.intermediate", H, I);
  dense("layer.ffn.output", I, H);
  norm("layer.ffn.norm", H);
  dense("mlm.dense", H, E);
  norm("mlm.norm", E);
  tensors.push({ name: "mlm.output.bias", shape: [V] });
  return tensors;
}

/** Elements of a tensor of `shape` (1 for a scalar). */
export function elementCount(shape: readonly number[]): number {
  return shape.reduce((product, size) => product * size, 1);
}
