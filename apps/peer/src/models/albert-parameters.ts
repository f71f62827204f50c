import type { ModelConfig } from "@barnraise/protocol";
import { ModelError, ModelErrorCode } from "./model-error.ts";
import type { Initializer, ParameterSpec } from "./variable-set.ts";

/** The `model` part of a config with preset "albert-mlm". */
export type AlbertMlmConfig = Extract<ModelConfig, { preset: "albert-mlm" }>;

/** Standard deviation of ALBERT's (and BERT's) truncated-normal initializer. */
export const ALBERT_INIT_STD = 0.02;

/**
 * The parameters of the ALBERT-style masked LM, in layout order (V vocabSize, E embeddingSize,
 * H hiddenSize, I intermediateSize, P maxSequenceLength):
 *
 * 1. `embeddings.word` [V, E], `embeddings.position` [P, E], `embeddings.norm.gain|bias` [E],
 *    `embeddings.projection.kernel` [E, H], `.bias` [H] (the factorized embedding);
 * 2. the ONE transformer layer every depth reuses: `layer.attention.{query,key,value,output}.kernel`
 *    [H, H] and `.bias` [H], `layer.attention.norm.gain|bias` [H], `layer.ffn.intermediate.kernel`
 *    [H, I], `.bias` [I], `layer.ffn.output.kernel` [I, H], `.bias` [H], `layer.ffn.norm.gain|bias` [H];
 * 3. the MLM head: `mlm.dense.kernel` [H, E], `.bias` [E], `mlm.norm.gain|bias` [E], and
 *    `mlm.output.bias` [V] (the output projection itself is `embeddings.word`ᵀ, tied).
 *
 * numLayers does not appear: depth reuses the shared layer. There are no token-type embeddings
 * (batches are single-segment). Matrices start N(0, 0.02) cut at ±2σ, biases 0, norm gains 1.
 * Throws INVALID_CONFIG when hiddenSize is not divisible by numHeads.
 */
export function albertParameterSpecs(config: AlbertMlmConfig): ParameterSpec[] {
  if (config.hiddenSize % config.numHeads !== 0) {
    throw new ModelError(
      ModelErrorCode.INVALID_CONFIG,
      `hiddenSize ${config.hiddenSize} is not divisible by numHeads ${config.numHeads}; pick sizes that divide`,
    );
  }
  const V = config.vocabSize;
  const E = config.embeddingSize;
  const H = config.hiddenSize;
  const I = config.intermediateSize;
  const P = config.maxSequenceLength;
  const specs: ParameterSpec[] = [];
  const matrix = (name: string, rows: number, columns: number): void => {
    specs.push({ name, shape: [rows, columns], init: weightInit });
  };
  const vector = (name: string, length: number, init: Initializer = zeros): void => {
    specs.push({ name, shape: [length], init });
  };
  const dense = (prefix: string, rows: number, columns: number): void => {
    matrix(`${prefix}.kernel`, rows, columns);
    vector(`${prefix}.bias`, columns);
  };
  const norm = (prefix: string, length: number): void => {
    vector(`${prefix}.gain`, length, ones);
    vector(`${prefix}.bias`, length);
  };

  matrix("embeddings.word", V, E);
  matrix("embeddings.position", P, E);
  norm("embeddings.norm", E);
  dense("embeddings.projection", E, H);
  for (const part of ["query", "key", "value", "output"]) dense(`layer.attention.${part}`, H, H);
  norm("layer.attention.norm", H);
  dense("layer.ffn.intermediate", H, I);
  dense("layer.ffn.output", I, H);
  norm("layer.ffn.norm", H);
  dense("mlm.dense", H, E);
  norm("mlm.norm", E);
  vector("mlm.output.bias", V);
  return specs;
}

const weightInit: Initializer = { kind: "truncated-normal", std: ALBERT_INIT_STD };
const zeros: Initializer = { kind: "zeros" };
const ones: Initializer = { kind: "ones" };
