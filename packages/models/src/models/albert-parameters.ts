import { modelTensors, type ModelConfig } from "@barnraise/protocol";
import { ModelError, ModelErrorCode } from "./model-error.ts";
import type { Initializer, ParameterSpec } from "./variable-set.ts";

/** The `model` part of a config with preset "albert-mlm". */
export type AlbertMlmConfig = Extract<ModelConfig, { kind: "albert-mlm" }>;

/** Standard deviation of ALBERT's (and BERT's) truncated-normal initializer. */
export const ALBERT_INIT_STD = 0.02;

/**
 * The parameters of the ALBERT-style masked LM, in the protocol's layout order (`modelTensors`: the
 * factorized embedding, the ONE transformer layer every depth reuses, the MLM head with its output
 * projection tied to `embeddings.word`). Matrices start N(0, 0.02) cut at ±2σ, biases 0, norm
 * gains 1. Throws INVALID_CONFIG when hiddenSize is not divisible by numHeads.
 */
export function albertParameterSpecs(config: AlbertMlmConfig): ParameterSpec[] {
  if (config.hiddenSize % config.numHeads !== 0) {
    throw new ModelError(
      ModelErrorCode.INVALID_CONFIG,
      `hiddenSize ${config.hiddenSize} is not divisible by numHeads ${config.numHeads}; pick sizes that divide`,
    );
  }
  return modelTensors(config).map(({ name, shape }): ParameterSpec => ({
    name,
    shape,
    init: shape.length === 2 ? weightInit : name.endsWith(".gain") ? ones : zeros,
  }));
}

const weightInit: Initializer = { kind: "truncated-normal", std: ALBERT_INIT_STD };
const zeros: Initializer = { kind: "zeros" };
const ones: Initializer = { kind: "ones" };
