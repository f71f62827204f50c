import type { ModelConfig } from "@barnraise/protocol";
import { AlbertMlm } from "./albert-mlm.ts";
import { MnistMlp } from "./mnist-mlp.ts";
import type { TrainableModel } from "./trainable-model.ts";

/**
 * Builds the model preset a (parsed, validated) config names. The model allocates TF.js variables
 * on the current backend, so select the backend first; call `dispose()` when done.
 */
export function createModel(config: ModelConfig): TrainableModel {
  switch (config.preset) {
    case "mnist-mlp":
      return new MnistMlp(config);
    case "albert-mlm":
      return new AlbertMlm(config);
  }
}
