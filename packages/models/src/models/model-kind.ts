import type { DatasetManifest } from "@barnraise/protocol";
import type { ShardStream, ShardStreamOptions } from "../data/shard-stream.ts";
import type { SeededRandom } from "../seeded-random.ts";
import type { Batch } from "./batch.ts";

/**
 * What differs between the kinds of model a run trains (the digit classifier, the masked LM, an
 * organizer's uploaded model), for one built model: each kind is one file (`mnist-mlp-kind.ts`,
 * `albert-mlm-kind.ts`, `uploaded-model-kind.ts`), bound to the model's config (and, for an
 * uploaded model, the shape read from it), and chosen once, when the model is built
 * (`TrainableModel.kind`; `modelKindOf` for a config alone). Training, the batch-size choice and the
 * held-out evaluation ask the kind and never look at the config's model kind themselves.
 */
export interface ModelKind {
  /**
   * Activation memory of one sample in a training step, in bytes: what one forward plus backward
   * pass holds at its peak beyond the parameters and their gradient (the batch-size choice keeps a
   * minibatch's within the memory it may use).
   */
  readonly bytesPerSample: number;
  /** Rows per held-out batch: a short stretch of work on the evaluator's one event loop. */
  readonly heldOutBatchSize: number;
  /**
   * Whether a backend may lack a gradient kernel the model needs: an uploaded model's layers are
   * the organizer's choice (the wasm backend cannot train a convolution), the presets' ops are on
   * every backend. The peer then tries one step first (`ensureBackendTrains`).
   */
  readonly mayLackGradientKernels: boolean;
  /**
   * `size` stand-in samples of the model's exact shape, drawn from `random`: what they contain does
   * not matter, only that they cost what a real batch of that size costs (the batch-size choice
   * times a few steps on them before the first shard has downloaded).
   */
  syntheticBatch(size: number, random: SeededRandom): Batch;
  /**
   * The model's batches from a dataset's records; fails with a DatasetError INCOMPATIBLE when the
   * dataset does not fit the model (wrong format, a vocabulary larger than the model's, features or
   * classes other than an uploaded model's input and output take).
   */
  batches(records: DatasetRecords): AsyncGenerator<Batch, void, undefined>;
}

/**
 * A dataset's records for one stream, as a model kind reads them into its batches: the manifest,
 * the split's records in this peer's shard order, and the stream's grouping into batches (through
 * the shuffle buffer for "train"). `createBatchStream` makes them.
 */
export interface DatasetRecords {
  readonly manifest: DatasetManifest;
  /** The split's shards, each decoded into records by `decode`, downloaded ahead. */
  read<T>(decode: ShardStreamOptions<T>["decode"]): ShardStream<T>;
  /** Groups records into the stream's batches of rows: mixed for "train", in order for "test". */
  rows<T>(records: AsyncIterable<T>): AsyncIterable<T[]>;
  /** The seed of this stream's masking draws. */
  readonly maskingSeed: number;
}

/** Float32 bytes. */
export const FLOAT_BYTES = 4;
