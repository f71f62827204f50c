import { z } from "zod";
import {
  DATASET_FORMAT_VERSION,
  datasetCreatedFromSchema,
  datasetNameSchema,
  datasetSplitsSchema,
} from "@barnraise/protocol";

/**
 * Dataset schemas of the platform's API. The manifest itself (what `npm run datasets:prepare` writes
 * and `GET /api/v1/datasets/{name}` returns) lives in `@barnraise/protocol` so the peer validates
 * with the same definition; it is re-exported here. The byte layout of each format is described in
 * src/server/datasets/README.md.
 */

export {
  DATASET_FORMAT_VERSION,
  datasetManifestSchema,
  datasetNameSchema,
  datasetShardSchema,
  datasetSplitSchema,
  datasetSplitSummarySchema,
  mnistManifestSchema,
  SPECIAL_TOKENS,
  tokenManifestSchema,
} from "@barnraise/protocol";
export type {
  DatasetManifest,
  DatasetShard,
  DatasetSplit,
  DatasetSplitSummary,
  MnistManifest,
  TokenManifest,
} from "@barnraise/protocol";

export const datasetSummarySchema = z
  .strictObject({
    name: datasetNameSchema,
    format: z.enum(["mnist-u8", "tokens-u16le"]),
    formatVersion: z.literal(DATASET_FORMAT_VERSION),
    description: z.string(),
    createdFrom: datasetCreatedFromSchema,
    splits: datasetSplitsSchema,
  })
  .meta({ id: "DatasetSummary" });
export type DatasetSummary = z.infer<typeof datasetSummarySchema>;

export const datasetListSchema = z
  .strictObject({ datasets: z.array(datasetSummarySchema) })
  .meta({ id: "DatasetList" });
export type DatasetList = z.infer<typeof datasetListSchema>;
