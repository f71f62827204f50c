import type { ZodOpenApiPathsObject } from "zod-openapi";

export const datasetPaths: ZodOpenApiPathsObject = {};
