import type { DatasetManifest, DatasetShard } from "@barnraise/protocol";

/**
 * Where a peer gets a dataset from: its manifest and its shard files. `HttpDatasetSource` reads the
 * platform's routes; tests can fake this interface to script failures without a server.
 */
export interface DatasetSource {
  /** The dataset's manifest, validated (format version checked). */
  manifest(signal?: AbortSignal): Promise<DatasetManifest>;
  /** One shard's bytes, verified against the manifest's size and SHA-256. */
  shard(shard: DatasetShard, signal?: AbortSignal): Promise<Uint8Array>;
}
