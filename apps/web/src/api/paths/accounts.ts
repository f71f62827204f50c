import type { ZodOpenApiPathsObject } from "zod-openapi";

export const accountPaths: ZodOpenApiPathsObject = {};
