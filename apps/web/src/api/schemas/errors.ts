import { z } from "zod";
import type { ZodOpenApiResponsesObject } from "zod-openapi";
import { appErrorStatus, type AppErrorCode } from "../error-codes.ts";

/** The one error body of the API, and the error responses of an operation grouped by status. */

export const errorBodySchema = z
  .strictObject({
    error: z.strictObject({
      code: z.string().meta({ description: "Stable machine-readable code, e.g. NOT_FOUND" }),
      message: z.string().meta({ description: "What went wrong, for people" }),
      issues: z
        .array(
          z.strictObject({
            path: z
              .string()
              .meta({ description: 'Dotted field path, e.g. "config.training.targetBatchSize"' }),
            message: z.string(),
          }),
        )
        .optional()
        .meta({ description: "With INVALID_INPUT: every problem, by field" }),
    }),
  })
  .meta({ id: "ErrorResponse" });
export type ErrorBodySchema = z.infer<typeof errorBodySchema>;

/** The codes every session-authenticated JSON mutation can return before its own checks. */
export const mutationErrorCodes = [
  "INVALID_INPUT",
  "UNAUTHENTICATED",
  "CROSS_SITE_REQUEST",
  "PAYLOAD_TOO_LARGE",
  "UNSUPPORTED_MEDIA_TYPE",
] as const satisfies readonly AppErrorCode[];

/** Error responses for `codes`, one entry per HTTP status, each naming its codes. */
export function errorResponses(...codes: readonly AppErrorCode[]): ZodOpenApiResponsesObject {
  const byStatus = new Map<number, AppErrorCode[]>();
  for (const code of new Set(codes)) {
    const status = appErrorStatus[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const responses: ZodOpenApiResponsesObject = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    responses[String(status) as `${4 | 5}${string}`] = {
      description: `Error: ${list.join(", ")}`,
      content: { "application/json": { schema: errorBodySchema } },
    };
  }
  return responses;
}
