import type { ExperimentConfig } from "@barnraise/protocol";
import {
  CachedDatasetSource,
  createBatchStream,
  hashName,
  HttpDatasetSource,
  type Batch,
  type TrainableModel,
} from "@barnraise/models";
import type { VolunteerOptions } from "./volunteer-options.ts";

/** The run's dataset as this peer reads it. */
export interface PeerData {
  /** The training split, in this peer's own order, in batches of the local batch size. */
  readonly batches: AsyncGenerator<Batch, void, undefined>;
  /** The test split afresh, for the score at the end. */
  readonly testBatches: () => AsyncGenerator<Batch, void, undefined>;
  /** This peer's seed for its data order (from its PeerId). */
  readonly seed: number;
}

/**
 * Opens the dataset the experiment trains on: shards from the platform, verified by SHA-256 and
 * cached in the runtime's store, read in an order of this peer's own.
 */
export async function openData(
  options: VolunteerOptions,
  config: ExperimentConfig,
  model: TrainableModel,
  batchSize: number,
  peerId: string,
  startUp: AbortSignal,
): Promise<PeerData> {
  const { reporter, abortSignal } = options;
  const source = new CachedDatasetSource(
    new HttpDatasetSource({ serverUrl: options.server.href, dataset: config.dataset.name }),
    options.runtime.blobStore(config.dataset.name),
    (message, error) => {
      reporter.log("warn", message, error === undefined ? {} : { err: error });
    },
  );
  const manifest = await source.manifest(startUp);
  const seed = hashName(peerId);
  const split = (name: "train" | "test", size: number) =>
    createBatchStream({
      source,
      split: name,
      batchSize: size,
      seed,
      config,
      manifest,
      kind: model.kind,
      signal: abortSignal,
    });
  return { batches: split("train", batchSize), testBatches: () => split("test", 1000), seed };
}
