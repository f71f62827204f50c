import * as tf from "@tensorflow/tfjs-core";
import type { AlbertMlmConfig } from "./albert-parameters.ts";
import type { MaskedTokenBatch } from "./batch.ts";
import { dense, gatherRows, gelu, layerNorm, maybeDropout } from "./layer-ops.ts";
import { SeededRandom } from "../seeded-random.ts";

/** Looks a parameter up by its layout name (see `albertParameterSpecs`). */
export type ParameterLookup = (name: string) => tf.Tensor;

/** Added to attention scores of padding keys, so softmax gives them (almost) no weight. */
const MASKED_SCORE = -10_000;

/**
 * Where dropout draws from: each dropout site takes the next 32-bit seed of one SeededRandom
 * stream, so a step's masks depend only on the step's seed. Undefined for evaluation.
 */
export class DropoutSeeds {
  readonly rate: number;
  readonly #random: SeededRandom;

  constructor(rate: number, seed: number) {
    this.rate = rate;
    this.#random = new SeededRandom(seed, 0xd20f0e7);
  }

  /** Dropout on `x` with the next seed of the stream. */
  apply<T extends tf.Tensor>(x: T): T {
    return maybeDropout(x, this.rate, this.#random.nextUint32());
  }
}

/**
 * The ALBERT forward pass up to the MLM logits, for the cells listed in `rows` only (flat
 * indices into `size × sequenceLength`): the head and the [rows, V] logits are the expensive part
 * at a large vocabulary, and only masked cells are scored. Post-LN residuals as in BERT; the one
 * shared layer is applied `numLayers` times. Allocates tensors: call inside a tidy scope.
 */
export function albertMaskedLogits(
  config: AlbertMlmConfig,
  parameter: ParameterLookup,
  batch: MaskedTokenBatch,
  rows: Int32Array,
  dropout: DropoutSeeds | undefined,
): tf.Tensor2D {
  const drop = <T extends tf.Tensor>(x: T): T => (dropout === undefined ? x : dropout.apply(x));
  const B = batch.size;
  const T = batch.sequenceLength;
  const E = config.embeddingSize;

  // Factorized embedding: token (V×E) + position, LayerNorm, dropout, then project E → H.
  const word = parameter("embeddings.word");
  const tokens = tf.reshape(gatherRows(word as tf.Tensor2D, batch.inputIds), [B, T, E]);
  const positions = tf.slice(parameter("embeddings.position"), [0, 0], [T, E]);
  let embedded = tf.reshape<tf.Rank.R2>(tf.add(tokens, positions), [B * T, E]);
  embedded = drop(layerNorm(embedded, parameter("embeddings.norm.gain"), parameter("embeddings.norm.bias")));
  let hidden = dense(
    embedded,
    parameter("embeddings.projection.kernel"),
    parameter("embeddings.projection.bias"),
  );

  const scoreBias = attentionScoreBias(batch, config.numHeads);

  for (let layer = 0; layer < config.numLayers; layer++) {
    hidden = sharedLayer(config, parameter, hidden, B, T, scoreBias, drop);
  }

  // MLM head on the masked cells: dense H → E, GELU, LayerNorm, then the tied projection E → V.
  const picked = gatherRows(hidden, rows);
  const head = layerNorm(
    gelu(dense(picked, parameter("mlm.dense.kernel"), parameter("mlm.dense.bias"))),
    parameter("mlm.norm.gain"),
    parameter("mlm.norm.bias"),
  );
  return tf.add(tf.matMul(head, word as tf.Tensor2D, false, true), parameter("mlm.output.bias"));
}

/**
 * [B, heads, T, T]: 0 where a query may attend to a key, MASKED_SCORE where the key is padding.
 * Built at full size in JavaScript rather than broadcast from [B, 1, 1, T], because the CPU
 * backend's broadcasting over size-1 axes runs index arithmetic per element (several times slower).
 */
function attentionScoreBias(batch: MaskedTokenBatch, heads: number): tf.Tensor4D {
  const T = batch.sequenceLength;
  const bias = new Float32Array(batch.size * heads * T * T);
  for (let b = 0; b < batch.size; b++) {
    const row = new Float32Array(T);
    for (let k = 0; k < T; k++) row[k] = batch.attentionMask[b * T + k] === 1 ? 0 : MASKED_SCORE;
    for (let q = 0; q < heads * T; q++) bias.set(row, (b * heads * T + q) * T);
  }
  return tf.tensor4d(bias, [batch.size, heads, T, T]);
}

/** One application of the shared transformer layer to hidden states [B·T, H]. */
function sharedLayer(
  config: AlbertMlmConfig,
  parameter: ParameterLookup,
  x: tf.Tensor2D,
  B: number,
  T: number,
  scoreBias: tf.Tensor,
  drop: <U extends tf.Tensor>(x: U) => U,
): tf.Tensor2D {
  const H = config.hiddenSize;
  const heads = config.numHeads;
  const headSize = H / heads;
  const project = (name: string): tf.Tensor2D =>
    dense(x, parameter(`layer.attention.${name}.kernel`), parameter(`layer.attention.${name}.bias`));
  // [B·T, H] → [B, heads, T, headSize]
  const splitHeads = (t: tf.Tensor2D): tf.Tensor4D =>
    tf.transpose(tf.reshape(t, [B, T, heads, headSize]), [0, 2, 1, 3]);

  const query = splitHeads(project("query"));
  const key = splitHeads(project("key"));
  const value = splitHeads(project("value"));
  const scores = tf.add(tf.mul(tf.matMul(query, key, false, true), 1 / Math.sqrt(headSize)), scoreBias);
  const weights = drop(tf.softmax(scores, -1));
  const context = tf.reshape(tf.transpose(tf.matMul(weights, value), [0, 2, 1, 3]), [B * T, H]);
  const attended = drop(
    dense(
      context as tf.Tensor2D,
      parameter("layer.attention.output.kernel"),
      parameter("layer.attention.output.bias"),
    ),
  );
  const afterAttention = layerNorm(
    tf.add(x, attended),
    parameter("layer.attention.norm.gain"),
    parameter("layer.attention.norm.bias"),
  );

  const inner = gelu(
    dense(
      afterAttention,
      parameter("layer.ffn.intermediate.kernel"),
      parameter("layer.ffn.intermediate.bias"),
    ),
  );
  const output = drop(dense(inner, parameter("layer.ffn.output.kernel"), parameter("layer.ffn.output.bias")));
  return layerNorm(
    tf.add(afterAttention, output),
    parameter("layer.ffn.norm.gain"),
    parameter("layer.ffn.norm.bias"),
  );
}
