import type { ModelConfig } from "@barnraise/protocol";
import { albertMlmKind } from "./albert-mlm-kind.ts";
import { mnistMlpKind } from "./mnist-mlp-kind.ts";
import type { ModelKind } from "./model-kind.ts";
import type { UploadedModelShape } from "./trainable-model.ts";
import { uploadedModelKind } from "./uploaded-model-kind.ts";

/**
 * The kind of the model `config` names, without building the model (a built model has its own,
 * `TrainableModel.kind`): the one place besides `createModel` that tells the kinds apart. An
 * uploaded model's kind needs its shape, which only the built model knows (`UploadedModelShape`):
 * without `shape` it is a RangeError.
 */
export function modelKindOf(config: ModelConfig, shape?: UploadedModelShape): ModelKind {
  if (config.preset === "mnist-mlp") return mnistMlpKind(config);
  if (config.preset === "albert-mlm") return albertMlmKind(config);
  if (shape === undefined) {
    throw new RangeError("an uploaded model's kind needs its shape: use the built model's `kind`");
  }
  return uploadedModelKind(config, shape);
}
