import {
  LAYERS_WEIGHTS_FILE,
  LayersModelError,
  parseLayersModelJson,
  type LayersModelJson,
} from "@barnraise/protocol";
import { sha256Hex } from "../data/sha256.ts";
import { ModelError, ModelErrorCode } from "./model-error.ts";

/**
 * An organizer's uploaded TF.js Layers model as the platform stores it: a canonical model.json
 * whose SHA-256 is the model's id (the signed config's `model.sha256`) and which names its one
 * weights file by that file's SHA-256. So the one signed hash pins both files, and a peer checks
 * every byte before it trains: what it builds is what the organizer uploaded and the platform
 * signed, whatever server, cache or proxy the bytes came through.
 */
export interface LayersArtifact {
  /** The model's id: the SHA-256 of `modelJson`. */
  readonly sha256: string;
  /** model.json exactly as stored. */
  readonly modelJson: Uint8Array;
  readonly model: LayersModelJson;
  /** The weights file's name, `weights-<its SHA-256>.bin`. */
  readonly weightsFile: string;
  /** Every weight, float32 little-endian, in manifest order (`model.weights[i].byteOffset`). */
  readonly weights: Uint8Array<ArrayBuffer>;
}

/** The model.json of an artifact, checked; the weights are not read yet. */
export interface VerifiedModelJson {
  readonly sha256: string;
  readonly modelJson: Uint8Array;
  readonly model: LayersModelJson;
  readonly weightsFile: string;
  /** The SHA-256 `weightsFile` names, which the weights must have. */
  readonly weightsSha256: string;
}

/**
 * Checks a model.json against the signed `sha256`, then parses it with the protocol's checks and
 * requires the stored form: one weights group with one file named by its hash. Throws
 * MODEL_TAMPERED when the bytes are not the signed ones, MODEL_INVALID when they are but do not
 * make a stored model.
 */
export async function verifyModelJson(
  bytes: Uint8Array<ArrayBuffer>,
  sha256: string,
): Promise<VerifiedModelJson> {
  const actual = await sha256Hex(bytes);
  if (actual !== sha256) {
    throw tampered(
      sha256,
      `model.json has SHA-256 ${actual}, not the ${sha256} the experiment's signed config names`,
    );
  }
  let model: LayersModelJson;
  try {
    model = parseLayersModelJson(bytes);
  } catch (error) {
    if (!(error instanceof LayersModelError)) throw error;
    throw new ModelError(
      ModelErrorCode.MODEL_INVALID,
      `the uploaded model ${short(sha256)} is the signed one but cannot be trained: ${error.message}; ` +
        "the organizer must upload a model that passes the platform's checks",
      { cause: error },
    );
  }
  const [group, ...others] = model.groups;
  const [weightsFile, ...otherFiles] = group?.paths ?? [];
  const match = weightsFile === undefined ? null : LAYERS_WEIGHTS_FILE.exec(weightsFile);
  if (others.length > 0 || otherFiles.length > 0 || weightsFile === undefined || match?.[1] === undefined) {
    throw new ModelError(
      ModelErrorCode.MODEL_INVALID,
      `the uploaded model ${short(sha256)} is not in the platform's stored form: its model.json must ` +
        `name one weights file weights-<sha256>.bin, not ${JSON.stringify(model.groups.map((g) => g.paths))}`,
    );
  }
  return { sha256, modelJson: bytes, model, weightsFile, weightsSha256: match[1] };
}

/**
 * Checks the weights file against the model.json that names it: exactly the bytes its manifest
 * needs, with the SHA-256 in its name. Throws MODEL_TAMPERED otherwise.
 */
export async function verifyWeights(
  json: VerifiedModelJson,
  weights: Uint8Array<ArrayBuffer>,
): Promise<LayersArtifact> {
  if (weights.byteLength !== json.model.weightBytes) {
    throw tampered(
      json.sha256,
      `${json.weightsFile} holds ${weights.byteLength} bytes, but the signed model.json's weights need ` +
        `${json.model.weightBytes}`,
    );
  }
  const actual = await sha256Hex(weights);
  if (actual !== json.weightsSha256) {
    throw tampered(
      json.sha256,
      `${json.weightsFile} has SHA-256 ${actual}, not the one its name and the signed model.json give`,
    );
  }
  return {
    sha256: json.sha256,
    modelJson: json.modelJson,
    model: json.model,
    weightsFile: json.weightsFile,
    weights,
  };
}

/** The error for bytes that are not the signed ones; `what` says which file and how. */
export function tampered(sha256: string, what: string): ModelError {
  return new ModelError(
    ModelErrorCode.MODEL_TAMPERED,
    `the uploaded model ${short(sha256)} differs from the signed SHA-256 (${what}); the file was altered on ` +
      "the platform or on the way, so this peer refuses to train it. Tell the experiment's organizer",
  );
}

/** The first 12 hex digits of a model id, enough to tell models apart in a message. */
export function short(sha256: string): string {
  return sha256.slice(0, 12);
}
