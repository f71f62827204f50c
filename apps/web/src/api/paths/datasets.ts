import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import {
  createDatasetImportInputSchema,
  datasetImportSchema,
  datasetListSchema,
  datasetManifestSchema,
  datasetNameSchema,
} from "../schemas/datasets.ts";
import { errorResponses, mutationErrorCodes } from "../schemas/errors.ts";

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

const importParams = z.object({ id: z.string().meta({ description: "The import's id (from its POST)" }) });
const uploadParams = z.object({
  id: z
    .string()
    .meta({ description: "The upload's id: the last segment of the `Location` its POST returned" }),
});
const tusResumable = z.literal("1.0.0").meta({ description: "The tus protocol version; required" });
const tusText = (description: string) => ({
  description,
  content: { "text/plain": { schema: z.string().meta({ description: "What went wrong, for people" }) } },
});
const tusErrors = {
  "401": tusText("Not signed in"),
  "403": tusText("The upload is someone else's, or the request came from another site"),
  "404": tusText("No such upload"),
  "412": tusText("`Tus-Resumable` is missing"),
};
const uploadsNote =
  "A tus 1.0 endpoint (https://tus.io/protocols/resumable-upload; extensions creation, " +
  "creation-with-upload, creation-defer-length, termination): use a tus client such as tus-js-client. " +
  "Who: a signed-in user (the Auth.js session cookie), and for an existing upload only the user who " +
  "created it. Errors are plain text, as tus clients expect. Uploads live under `<data dir>/uploads/` " +
  "until an import converts them (then they are deleted) or their owner deletes them.";

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
  "/api/v1/datasets/imports": {
    post: {
      tags: ["datasets"],
      summary: "Import an uploaded file as a dataset",
      description:
        "Who: a signed-in user, with a finished upload of their own. Converts the upload in the " +
        "background (202): a CSV into a `tabular-f32` dataset, a zip archive of class folders into an " +
        "`image-u8` dataset (each image resized to `width` × `height`), a plain text into a " +
        "`tokens-u16le` dataset; poll `GET /api/v1/datasets/imports/{id}`. The rules of each format " +
        "(columns, class folders, tokens, test split) are in the platform's datasets README. " +
        "CONFLICT: a dataset or an import under way has the name (or it is one the platform prepares " +
        "itself), or the upload is not complete. FORBIDDEN: the upload is someone else's.",
      requestBody: {
        required: true,
        content: { "application/json": { schema: createDatasetImportInputSchema } },
      },
      responses: {
        "202": {
          description: "The import, queued; `Location` is its URL",
          content: { "application/json": { schema: datasetImportSchema } },
        },
        ...errorResponses(...mutationErrorCodes, "FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/datasets/imports/{id}": {
    get: {
      tags: ["datasets"],
      summary: "An import's status and progress",
      description:
        "Who: the user who started it. `queued` → `converting` (bytesDone and records grow, written about " +
        "once a second) → `ready` (the dataset is listed and served) or `failed` (`error` says why, with " +
        "the file's line and column for a bad row). An import whose conversion was cut short by a restart " +
        "reads as failed.",
      requestParams: { path: importParams },
      responses: {
        "200": {
          description: "The import",
          content: { "application/json": { schema: datasetImportSchema } },
        },
        ...errorResponses("UNAUTHENTICATED", "FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/uploads": {
    post: {
      tags: ["uploads"],
      summary: "Create a resumable upload (tus)",
      description: `${uploadsNote} \`Upload-Metadata\` may carry \`filename\` (kept as the dataset's source name) and \`filetype\`.`,
      requestParams: {
        header: z.object({
          "tus-resumable": tusResumable,
          "upload-length": z.string().optional().meta({ description: "The file's size in bytes" }),
          "upload-defer-length": z
            .literal("1")
            .optional()
            .meta({ description: "The size is declared later" }),
          "upload-metadata": z
            .string()
            .optional()
            .meta({ description: "tus metadata: `filename <base64>,filetype <base64>`" }),
        }),
      },
      responses: {
        "201": { description: "Created; `Location: /api/v1/uploads/{id}`" },
        "400": tusText("A malformed tus header or file name"),
        "413": tusText("Larger than BARNRAISE_MAX_UPLOAD_BYTES (4 GiB by default)"),
        ...tusErrors,
      },
    },
    options: {
      tags: ["uploads"],
      summary: "The tus server's capabilities",
      description:
        "Who: anyone. `Tus-Version`, `Tus-Extension` and `Tus-Max-Size` (BARNRAISE_MAX_UPLOAD_BYTES).",
      responses: { "204": { description: "The capabilities, in headers" } },
    },
  },
  "/api/v1/uploads/{id}": {
    head: {
      tags: ["uploads"],
      summary: "An upload's offset (to resume it)",
      description: `${uploadsNote} \`Upload-Offset\` is the number of bytes received so far.`,
      requestParams: { path: uploadParams, header: z.object({ "tus-resumable": tusResumable }) },
      responses: {
        "200": { description: "`Upload-Offset`, `Upload-Length`, `Upload-Metadata`" },
        ...tusErrors,
      },
    },
    patch: {
      tags: ["uploads"],
      summary: "Append to an upload",
      description: `${uploadsNote} The body (\`application/offset+octet-stream\`) is written at \`Upload-Offset\`, which must equal the bytes received so far (409 otherwise).`,
      requestParams: {
        path: uploadParams,
        header: z.object({
          "tus-resumable": tusResumable,
          "upload-offset": z.string().meta({ description: "Where the body goes: the current offset" }),
        }),
      },
      requestBody: { required: true, content: { "application/offset+octet-stream": binary } },
      responses: {
        "204": { description: "Appended; `Upload-Offset` is the new offset" },
        "409": tusText("`Upload-Offset` is not the upload's offset"),
        "413": tusText("More bytes than the upload's length or the platform's limit"),
        ...tusErrors,
      },
    },
    delete: {
      tags: ["uploads"],
      summary: "Delete an upload",
      description: uploadsNote,
      requestParams: { path: uploadParams, header: z.object({ "tus-resumable": tusResumable }) },
      responses: { "204": { description: "Deleted" }, ...tusErrors },
    },
  },
};
