import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { datasetListSchema, datasetManifestSchema, datasetNameSchema } from "../schemas/datasets.ts";
import { errorResponses } from "../schemas/errors.ts";

const nameParams = z.object({ name: datasetNameSchema });
const fileParams = z.object({
  name: datasetNameSchema,
  file: z.string().meta({
    description: "A shard's `file` (or the vocabulary's `file`) exactly as the manifest names it",
    examples: ["train-00000.bin"],
  }),
});

const rangeHeader = z.object({
  range: z
    .string()
    .optional()
    .meta({
      description:
        "One byte range: `bytes=a-b`, `bytes=a-` or `bytes=-n`. Several ranges or a malformed header get the whole file",
      examples: ["bytes=0-784"],
    }),
  "if-none-match": z.string().optional().meta({ description: "The shard's ETag (its sha256, quoted)" }),
  "if-range": z.string().optional().meta({ description: "Honour `Range` only if the ETag still matches" }),
});

const binary = { schema: z.string().meta({ format: "binary" }) };

export const datasetPaths: ZodOpenApiPathsObject = {
  "/api/v1/datasets": {
    get: {
      tags: ["datasets"],
      summary: "The prepared datasets",
      description: "Datasets are prepared on the platform's host with `npm run datasets:prepare`.",
      responses: {
        "200": {
          description: "Every prepared dataset",
          content: { "application/json": { schema: datasetListSchema } },
        },
      },
    },
  },
  "/api/v1/datasets/{name}": {
    get: {
      tags: ["datasets"],
      summary: "A dataset's shard manifest",
      description:
        "Splits, the record format, and every shard with its size and sha256. Shards are fetched from " +
        "`/api/v1/datasets/{name}/shards/{file}`; the byte layouts are described in the platform's " +
        "datasets README.",
      requestParams: { path: nameParams },
      responses: {
        "200": {
          description: "The manifest",
          content: { "application/json": { schema: datasetManifestSchema } },
        },
        ...errorResponses("NOT_FOUND"),
      },
    },
  },
  "/api/v1/datasets/{name}/shards/{file}": {
    get: {
      tags: ["datasets"],
      summary: "A shard file",
      description:
        "Public and cacheable (`Cache-Control: public, max-age=3600`, ETag = the file's sha256). Only " +
        "the files the manifest names are served.",
      requestParams: { path: fileParams, header: rangeHeader },
      responses: {
        "200": {
          description: "The whole file",
          content: { "application/octet-stream": binary, "text/plain": binary },
        },
        "206": {
          description: "The requested range, with `Content-Range`",
          content: { "application/octet-stream": binary, "text/plain": binary },
        },
        "304": { description: "Not modified (`If-None-Match` matched)" },
        ...errorResponses("NOT_FOUND", "RANGE_NOT_SATISFIABLE"),
      },
    },
  },
};
