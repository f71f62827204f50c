import {
  DEFAULT_MASK_PROBABILITY,
  isLanguageModelTask,
  type DatasetManifest,
  type DatasetSplit,
  type ExperimentConfig,
  type ImageManifest,
  type UploadedModelConfig,
  type TabularManifest,
  type TokenManifest,
} from "@barnraise/protocol";
import type { AlbertMlmConfig } from "../models/albert-parameters.ts";
import type { Batch, ImageBatch, TabularBatch } from "../models/batch.ts";
import type { DatasetRecords, ModelKind } from "../models/model-kind.ts";
import type { UploadedModelShape } from "../models/trainable-model.ts";
import { DatasetError, DatasetErrorCode } from "./dataset-error.ts";
import type { DatasetSource } from "./dataset-source.ts";
import { toImageBatch } from "./image-batcher.ts";
import { decodeImageShard } from "./image-decoder.ts";
import { MaskedTokenBatcher } from "./masked-token-batcher.ts";
import { nextTokenBatch } from "./next-token-batcher.ts";
import { decodeMnistShard } from "./mnist-decoder.ts";
import { ShardStream } from "./shard-stream.ts";
import { ShuffleBuffer, shuffled } from "./shuffle-buffer.ts";
import { deriveSeed, SeededRandom } from "../seeded-random.ts";
import { imagesToTabularBatch, toTabularBatch } from "./tabular-batcher.ts";
import { decodeTabularShard } from "./tabular-decoder.ts";
import { decodeTokenShard } from "./token-decoder.ts";

/** Shards downloaded ahead of the one being read, unless the caller says otherwise. */
export const DEFAULT_PREFETCH = 2;

/** Options of `createBatchStream`. */
export interface BatchStreamOptions {
  readonly source: DatasetSource;
  readonly split: DatasetSplit;
  /** Rows per batch; the last "test" batch may be smaller. */
  readonly batchSize: number;
  /** This peer's seed (e.g. `hashName(peerId)`): shard order, shuffle buffer and masking. */
  readonly seed: number;
  /** The experiment: its dataset and shuffle buffer. */
  readonly config: ExperimentConfig;
  /** The kind of the model the batches are for (`TrainableModel.kind`): it reads the records into batches. */
  readonly kind: ModelKind;
  /** Shards downloaded ahead; defaults to DEFAULT_PREFETCH. */
  readonly prefetch?: number;
  /** Stops the stream and cancels pending downloads (as does `return()`). */
  readonly signal?: AbortSignal;
  /** A manifest already fetched from `source`; fetched on the first `next()` otherwise. */
  readonly manifest?: DatasetManifest;
}

/** Seed streams, so shard order, shuffling and masking draw independent numbers from one seed. */
const Stream = { shardOrder: 1, shuffle: 2, masking: 3 } as const;

/**
 * The batches a model trains on, read from the platform's shards by its kind (`options.kind`): "train" is endless (shards
 * in this peer's order, mixed through a shuffle buffer of `config.dataset.shuffleBufferSize`),
 * "test" is one ordered pass. Shards download in the background while batches are consumed;
 * `return()` or aborting `signal` releases the pending downloads. Fails with a DatasetError when
 * the dataset does not fit the model (wrong format, vocabulary larger than the model's, features
 * or classes other than an uploaded model's input and output take).
 */
export function createBatchStream(options: BatchStreamOptions): AsyncGenerator<Batch, void, undefined> {
  if (!Number.isInteger(options.batchSize) || options.batchSize < 1) {
    throw new RangeError(`batchSize must be a positive integer, got ${options.batchSize}`);
  }
  return batches(options);
}

async function* batches(options: BatchStreamOptions): AsyncGenerator<Batch, void, undefined> {
  const { source, split, seed, config, signal } = options;
  const manifest = options.manifest ?? (await source.manifest(signal));
  if (manifest.name !== config.dataset.name) {
    throw incompatible(
      `the experiment trains on dataset ${config.dataset.name}, the source serves ${manifest.name}`,
    );
  }
  const common = {
    source,
    manifest,
    split,
    seed: deriveSeed(seed, Stream.shardOrder),
    prefetch: options.prefetch ?? DEFAULT_PREFETCH,
    ...(signal === undefined ? {} : { signal }),
  };
  yield* options.kind.batches({
    manifest,
    read: (decode) => new ShardStream({ ...common, decode }),
    rows: (records) => inBatches(mix(records, options), options),
    maskingSeed: deriveSeed(seed, Stream.masking),
  });
}

/** The digit classifier's batches: 28×28 images and their digits (`mnist-u8` records). */
export async function* digitBatches(records: DatasetRecords): AsyncGenerator<ImageBatch> {
  const { manifest } = records;
  if (manifest.format !== "mnist-u8")
    throw incompatible(`mnist-mlp needs mnist-u8 records, not ${manifest.format}`);
  const images = records.read((bytes, shard) => decodeMnistShard(bytes, shard.file, shard.records));
  for await (const rows of records.rows(images)) yield toImageBatch(rows);
}

/** The masked LM preset's batches: sentences with the config's share of tokens masked. */
export async function* maskedSentenceBatches(
  records: DatasetRecords,
  model: AlbertMlmConfig,
): AsyncGenerator<Batch> {
  const { tokens, vocabulary } = tokenRecords(
    records,
    model.vocabSize,
    `raise model.vocabSize or prepare the dataset with --vocab-size ${model.vocabSize}`,
  );
  const batcher = new MaskedTokenBatcher({
    sequenceLength: model.maxSequenceLength,
    maskProbability: model.maskProbability,
    vocabSize: vocabulary.size,
    specialTokens: vocabulary.specialTokens,
    random: new SeededRandom(records.maskingSeed),
  });
  for await (const rows of records.rows(tokens)) yield batcher.batch(rows);
}

/**
 * An uploaded model's batches, once the dataset is known to fit its shape: sentences for a
 * language model, rows of features (from a table or images) for the other tasks.
 */
export function uploadedModelBatches(
  records: DatasetRecords,
  model: UploadedModelConfig,
  shape: UploadedModelShape,
): AsyncGenerator<Batch> {
  return isLanguageModelTask(model.task)
    ? languageModelBatches(records, model, shape)
    : tabularBatches(records, model, shape);
}

/**
 * The sentences of a text dataset (`tokens-u16le`) whose vocabulary a model of `modelVocabulary`
 * tokens embeds and predicts; `fix` tells the organizer what to change when it does not.
 */
function tokenRecords(
  records: DatasetRecords,
  modelVocabulary: number,
  fix: string,
): { tokens: ShardStream<Uint16Array>; vocabulary: TokenManifest["vocabulary"] } {
  const { manifest } = records;
  if (manifest.format !== "tokens-u16le")
    throw incompatible(`a language model needs tokens-u16le records (a text), not ${manifest.format}`);
  const { vocabulary } = manifest;
  const { size: vocabSize, specialTokens } = vocabulary;
  if (vocabSize > modelVocabulary) {
    throw incompatible(
      `the dataset's vocabulary has ${vocabSize} tokens but the model embeds only ${modelVocabulary}; ${fix}`,
    );
  }
  const tokens = records.read((bytes, shard) =>
    decodeTokenShard(bytes, shard.file, { vocabSize, specialTokens, expectedRecords: shard.records }),
  );
  return { tokens, vocabulary };
}

/**
 * Sentences for an uploaded language model, as many ids a row as its input reads: next-token rows
 * (each position predicts the one after it) or masked rows (the config's share of tokens hidden
 * behind [MASK] and predicted, as the masked LM preset's).
 */
async function* languageModelBatches(
  records: DatasetRecords,
  model: UploadedModelConfig,
  shape: UploadedModelShape,
): AsyncGenerator<Batch> {
  // Every id must fit the Embedding that reads it and the output that predicts it.
  const limit = Math.min(shape.outputUnits, shape.tokenIds ?? Infinity);
  const { tokens, vocabulary } = tokenRecords(
    records,
    limit,
    `import the text with a vocabulary size of at most ${limit} (${
      limit === shape.outputUnits ? "the model's output units" : "the ids its Embedding reads"
    })`,
  );
  const sequenceLength = shape.features;
  const rows = records.rows(tokens);
  if (model.task === "next-token") {
    for await (const sentences of rows)
      yield nextTokenBatch(sentences, sequenceLength, vocabulary.specialTokens);
    return;
  }
  if (sequenceLength < 3) {
    throw incompatible(
      `a masked language model reads [CLS] tokens… [SEP]: its input needs at least 3 positions, it has ${sequenceLength}`,
    );
  }
  const batcher = new MaskedTokenBatcher({
    sequenceLength,
    maskProbability: model.maskProbability ?? DEFAULT_MASK_PROBABILITY,
    vocabSize: vocabulary.size,
    specialTokens: vocabulary.specialTokens,
    random: new SeededRandom(records.maskingSeed),
  });
  for await (const sentences of rows) yield batcher.batch(sentences);
}

/**
 * Rows for an uploaded model, once the dataset is known to fit it: as many features as its input
 * takes, and labels of its task (as many classes as its output has units).
 */
async function* tabularBatches(
  records: DatasetRecords,
  model: UploadedModelConfig,
  shape: UploadedModelShape,
): AsyncGenerator<TabularBatch> {
  const { manifest } = records;
  const { features } = shape;
  if (manifest.format === "image-u8") {
    const classes = imageClasses(model, manifest, shape);
    const images = records.read((bytes, shard) =>
      decodeImageShard(bytes, shard.file, { pixels: features, classes, expectedRecords: shard.records }),
    );
    for await (const rows of records.rows(images)) yield imagesToTabularBatch(rows, features);
    return;
  }
  if (manifest.format !== "tabular-f32") {
    throw incompatible(
      `a ${model.task} model trains on tabular-f32 or image-u8 records, not ${manifest.format}` +
        (manifest.format === "tokens-u16le"
          ? "; choose the next-token or masked-tokens task for a text"
          : ""),
    );
  }
  const classes = tabularClasses(model, manifest, shape);
  const rows = records.read((bytes, shard) =>
    decodeTabularShard(bytes, shard.file, { features, classes, expectedRecords: shard.records }),
  );
  for await (const batch of records.rows(rows)) yield toTabularBatch(batch, features);
}

/** The classes of a classifier's labels (undefined for a regression), once they fit the model. */
function tabularClasses(
  model: UploadedModelConfig,
  manifest: TabularManifest,
  shape: UploadedModelShape,
): number | undefined {
  const { features, label } = manifest.record;
  if (features.count !== shape.features) {
    throw incompatible(
      `its records have ${features.count} features, but the model's input [${shape.inputShape.join(", ")}] ` +
        `takes ${shape.features}; upload a dataset with the model's columns, or a model for this dataset`,
    );
  }
  if (model.task === "regression") {
    if (label.kind !== "value") {
      throw incompatible(
        `the model is a regression, but the label ${label.name} is a class; train a classifier on it`,
      );
    }
    return undefined;
  }
  if (label.kind !== "class") {
    throw incompatible(
      `the model is a classifier, but the label ${label.name} is a value; train a regression on it`,
    );
  }
  const classes = label.classes?.length ?? 0;
  if (classes !== shape.outputUnits) {
    throw incompatible(
      `the label ${label.name} has ${classes} classes, but the model's output layer has ${shape.outputUnits} units`,
    );
  }
  return classes;
}

/** The classes of an image dataset, once its images fill the model's input and its classes its output. */
function imageClasses(
  model: UploadedModelConfig,
  manifest: ImageManifest,
  shape: UploadedModelShape,
): number {
  const { image, label } = manifest.record;
  const pixels = image.height * image.width * image.channels;
  if (pixels !== shape.features) {
    throw incompatible(
      `its images are ${image.height}×${image.width}×${image.channels} (${pixels} values), but the model's input ` +
        `[${shape.inputShape.join(", ")}] takes ${shape.features}; import the images at the model's input size`,
    );
  }
  if (model.task !== "classification") {
    throw incompatible("an image dataset's labels are classes; train a classifier on it");
  }
  if (label.classes.length !== shape.outputUnits) {
    throw incompatible(
      `it has ${label.classes.length} classes, but the model's output layer has ${shape.outputUnits} units`,
    );
  }
  return label.classes.length;
}

/** Train records go through the shuffle buffer; test records keep their order. */
function mix<T>(stream: AsyncIterable<T>, options: BatchStreamOptions): AsyncIterable<T> {
  if (options.split === "test") return stream;
  const random = new SeededRandom(deriveSeed(options.seed, Stream.shuffle));
  return shuffled(stream, new ShuffleBuffer<T>(options.config.dataset.shuffleBufferSize, random));
}

/** Groups records into arrays of `batchSize`; a final short group is kept only for "test". */
async function* inBatches<T>(records: AsyncIterable<T>, options: BatchStreamOptions): AsyncGenerator<T[]> {
  let rows: T[] = [];
  for await (const record of records) {
    rows.push(record);
    if (rows.length === options.batchSize) {
      yield rows;
      rows = [];
    }
  }
  if (rows.length > 0 && options.split === "test") yield rows;
}

function incompatible(what: string): DatasetError {
  return new DatasetError(DatasetErrorCode.INCOMPATIBLE, `dataset does not fit the experiment: ${what}`);
}
