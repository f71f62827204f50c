import type { ZodOpenApiPathsObject } from "zod-openapi";

export const peerPaths: ZodOpenApiPathsObject = {};
