import { z } from "zod";
import {
  DATASET_FORMAT_VERSION,
  datasetCreatedFromSchema,
  datasetNameSchema,
  datasetSplitsSchema,
  IMAGE_LIMITS,
  SPECIAL_TOKENS,
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
  IMAGE_LIMITS,
  imageManifestSchema,
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
  ImageManifest,
  MnistManifest,
  TabularManifest,
  TokenManifest,
} from "@barnraise/protocol";

export const datasetSummarySchema = z
  .strictObject({
    name: datasetNameSchema,
    format: z.enum(["mnist-u8", "tokens-u16le", "tabular-f32", "image-u8"]),
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

const importCommon = {
  name: datasetNameSchema.meta({ description: "The new dataset's name; refused when a dataset has it" }),
  uploadId: z
    .string()
    .regex(/^[0-9a-f]{32}$/, "must be the id of an upload (the last segment of its URL)")
    .meta({ description: "The tus upload's id: the last path segment of its `Location`" }),
};

const imageSide = z.number().int().min(IMAGE_LIMITS.minSide).max(IMAGE_LIMITS.maxSide);

/** POST /api/v1/datasets/imports: convert a finished upload into a dataset. */
export const createDatasetImportInputSchema = z
  .discriminatedUnion("format", [
    z
      .strictObject({
        ...importCommon,
        format: z.literal("csv").meta({ description: "A CSV table: feature columns and a label column" }),
        labelColumn: z
          .string()
          .min(1)
          .max(1024)
          .optional()
          .meta({ description: "The label column's name in the header; the last column when left out" }),
        labelKind: labelKindSchema,
      })
      .meta({ id: "CreateCsvDatasetImport" }),
    z
      .strictObject({
        ...importCommon,
        format: z.literal("images").meta({ description: "A zip archive of images, one folder per class" }),
        width: imageSide.meta({ description: "Every image is resized to this width, in pixels" }),
        height: imageSide.meta({ description: "… and this height" }),
        channels: z
          .union([z.literal(1), z.literal(3)])
          .meta({ description: "1: grey, 3: RGB (the model's input channels)" }),
      })
      .meta({ id: "CreateImageDatasetImport" }),
    z
      .strictObject({
        ...importCommon,
        format: z.literal("text").meta({ description: "Plain UTF-8 text, a sentence or paragraph per line" }),
        vocabSize: z
          .number()
          .int()
          .min(SPECIAL_TOKENS.length + 1)
          .max(65_536)
          .optional()
          .meta({ description: "Tokens in the vocabulary, special tokens included; 4096 when left out" }),
      })
      .meta({ id: "CreateTextDatasetImport" }),
  ])
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
    bytesDone: z.number().int().nonnegative().meta({
      description: "Bytes of the file read so far, out of bytesTotal",
    }),
    bytesTotal: z.number().int().nonnegative().meta({
      description: "The bytes the conversion reads: the file's size (twice it for text, which is read twice)",
    }),
    records: z.number().int().nonnegative().meta({
      description:
        "Records converted so far (CSV rows, images, text lines); the dataset's records (train and test) once ready",
    }),
    error: z
      .string()
      .nullable()
      .meta({ description: "Why the import failed (a bad file names its line and column); null otherwise" }),
  })
  .meta({ id: "DatasetImport" });
export type DatasetImportView = z.infer<typeof datasetImportSchema>;
