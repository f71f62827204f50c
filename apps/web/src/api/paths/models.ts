import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { errorResponses, mutationErrorCodes } from "../schemas/errors.ts";

const sha256 = z
  .string()
  .regex(/^[0-9a-f]{64}$/)
  .meta({ description: "The model's id: SHA-256 of its stored model.json (lowercase hex)" });

export const storedModelSchema = z
  .strictObject({
    sha256,
    inputShape: z
      .array(z.number().int())
      .meta({ description: "One sample's input shape, without the batch dimension" }),
    outputUnits: z.number().int().meta({ description: "Units of the Dense output layer" }),
    outputActivation: z.string().meta({ examples: ["softmax", "linear"] }),
    parameters: z.number().int().meta({ description: "Trainable parameters: the vector the swarm averages" }),
    weightBytes: z.number().int(),
    layers: z.number().int(),
  })
  .meta({ id: "StoredModel" });

const modelBody = z.strictObject({ model: storedModelSchema });
const binary = { schema: z.string().meta({ format: "binary" }) };

export const modelPaths: ZodOpenApiPathsObject = {
  "/api/v1/models": {
    post: {
      tags: ["models"],
      summary: "Upload a TF.js Layers model",
      description:
        "multipart/form-data with one `files` part per file: model.json and every weights shard its " +
        "manifest names (what `tf.LayersModel.save()` or `tensorflowjs_converter` writes). The model is " +
        "validated (JSON, supported layers, float32 weights that fill the manifest exactly, limits: 8 MiB " +
        "model.json, 256 MiB weights, 32 million trainable parameters, a Dense output layer) and stored " +
        "content-addressed: the same model gives the same id. Each INVALID_INPUT issue's `path` is the " +
        "file at fault. At most 60 uploads an hour per user.",
      requestBody: {
        content: {
          "multipart/form-data": {
            schema: z.object({ files: z.array(z.string().meta({ format: "binary" })) }),
          },
        },
      },
      responses: {
        "201": { description: "Stored", content: { "application/json": { schema: modelBody } } },
        ...errorResponses(...mutationErrorCodes, "RATE_LIMITED"),
      },
    },
  },
  "/api/v1/models/{sha256}": {
    get: {
      tags: ["models"],
      summary: "An uploaded model's shape and size",
      requestParams: { path: z.object({ sha256 }) },
      responses: {
        "200": { description: "The model", content: { "application/json": { schema: modelBody } } },
        ...errorResponses("NOT_FOUND"),
      },
    },
  },
  "/api/v1/models/{sha256}/{file}": {
    get: {
      tags: ["models"],
      summary: "A stored model's model.json or weights",
      description:
        "`model.json` (its SHA-256 is the model's id) or the one weights file it names, " +
        "`weights-<sha256 of the file>.bin`, so `tf.loadLayersModel('/api/v1/models/{sha256}/model.json')` " +
        "opens the model and a peer can verify both files against the id in its signed config. Public and " +
        "immutable.",
      requestParams: {
        path: z.object({ sha256, file: z.string().meta({ examples: ["model.json"] }) }),
      },
      responses: {
        "200": {
          description: "The file",
          content: { "application/json": binary, "application/octet-stream": binary },
        },
        "206": {
          description: "A byte range of the weights",
          content: { "application/octet-stream": binary },
        },
        "304": { description: "Not modified" },
        ...errorResponses("NOT_FOUND", "RANGE_NOT_SATISFIABLE"),
      },
    },
  },
};
