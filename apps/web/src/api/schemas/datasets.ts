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
  tabularManifestSchema,
  tokenManifestSchema,
} from "@barnraise/protocol";
export type {
  DatasetManifest,
  DatasetShard,
  DatasetSplit,
  DatasetSplitSummary,
  MnistManifest,
  TabularManifest,
  TokenManifest,
} from "@barnraise/protocol";

export const datasetSummarySchema = z
  .strictObject({
    name: datasetNameSchema,
    format: z.enum(["mnist-u8", "tokens-u16le", "tabular-f32"]),
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

/** The label's meaning in a `tabular-f32` dataset: a class (classification) or a value (regression). */
export const labelKindSchema = z.enum(["class", "value"]).meta({
  id: "LabelKind",
  description:
    "`class`: the label column holds class ids (whole numbers 0, 1, …) or class names; `value`: a number to regress on",
});
export type LabelKind = z.infer<typeof labelKindSchema>;

/** POST /api/v1/datasets/imports: convert a finished upload into a dataset. */
export const createDatasetImportInputSchema = z
  .strictObject({
    name: datasetNameSchema.meta({ description: "The new dataset's name; refused when a dataset has it" }),
    uploadId: z
      .string()
      .regex(/^[0-9a-f]{32}$/, "must be the id of an upload (the last segment of its URL)")
      .meta({ description: "The tus upload's id: the last path segment of its `Location`" }),
    format: z.literal("csv").meta({ description: "The uploaded file's format" }),
    labelColumn: z
      .string()
      .min(1)
      .max(1024)
      .optional()
      .meta({ description: "The label column's name in the header; the last column when left out" }),
    labelKind: labelKindSchema,
  })
  .meta({ id: "CreateDatasetImport" });
export type CreateDatasetImportInput = z.infer<typeof createDatasetImportInputSchema>;

export const datasetImportStatusSchema = z
  .enum(["queued", "converting", "ready", "failed"])
  .meta({ id: "DatasetImportStatus" });
export type DatasetImportStatus = z.infer<typeof datasetImportStatusSchema>;

export const datasetImportSchema = z
  .strictObject({
    id: z.string(),
    name: datasetNameSchema,
    status: datasetImportStatusSchema,
    bytesDone: z.number().int().nonnegative().meta({ description: "Bytes of the file read so far" }),
    bytesTotal: z.number().int().nonnegative().meta({ description: "The file's size" }),
    records: z
      .number()
      .int()
      .nonnegative()
      .meta({ description: "Data rows converted so far; the dataset's records (train and test) once ready" }),
    error: z
      .string()
      .nullable()
      .meta({ description: "Why the import failed (a bad file names its line and column); null otherwise" }),
  })
  .meta({ id: "DatasetImport" });
export type DatasetImportView = z.infer<typeof datasetImportSchema>;
