import type { ZodOpenApiPathsObject } from "zod-openapi";

export const experimentPaths: ZodOpenApiPathsObject = {};
