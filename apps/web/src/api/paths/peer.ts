import { ProtocolErrorCode } from "@barnraise/protocol";
import { z } from "zod";
import type { ZodOpenApiOperationObject, ZodOpenApiPathsObject } from "zod-openapi";
import {
  checkpointUploadQuerySchema,
  joinRequestSchema,
  joinResponseSchema,
  metricsIngestedSchema,
  metricsReportSchema,
  okResponseSchema,
  registerAddressRequestSchema,
} from "../schemas/peer.ts";
import { checkpointSchema, experimentIdParamSchema } from "../schemas/public.ts";
import { errorResponse, listCheckpointsOperation, readMetricsOperation } from "./public.ts";

/**
 * The API of peer and aux programs: join with a peer token, and the routes an aux peer calls with a
 * signed request (DeDLOC I.5) in `Authorization: Barnraise <signed request>`.
 */

const signedHeader = z.object({
  authorization: z.string().meta({
    description:
      "`Barnraise <signed request>`: the caller's aux pass, recipient = the experiment's authority " +
      "key, scope = `<METHOD> <path with query>`, the body's SHA-256, time and nonce, signed by the " +
      "node's key",
  }),
});

const signedErrors = {
  "401": errorResponse(
    `UNAUTHENTICATED (no signed request) or a signed-request rejection: ${[
      ProtocolErrorCode.PASS_BAD_SIGNATURE,
      ProtocolErrorCode.PASS_EXPIRED,
      ProtocolErrorCode.PASS_WRONG_ROLE,
      ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
      ProtocolErrorCode.REQUEST_WRONG_RECIPIENT,
      ProtocolErrorCode.REQUEST_WRONG_SCOPE,
      ProtocolErrorCode.REQUEST_CLOCK_SKEW,
    ].join(", ")}`,
  ),
  "403": errorResponse("FORBIDDEN: the node's token was revoked, or its owner no longer organizes the run"),
  "404": errorResponse("NOT_FOUND: no such experiment"),
  "409": errorResponse(`${ProtocolErrorCode.REQUEST_REPLAYED}: the nonce was already used`),
} satisfies ZodOpenApiOperationObject["responses"];

function jsonContent(schema: z.ZodType) {
  return { "application/json": { schema } };
}

export const peerPaths: ZodOpenApiPathsObject = {
  "/api/v1/join": {
    post: {
      tags: ["peer"],
      summary: "Join with a peer token alone: the token names the experiment",
      description:
        "What `barnraise-peer --server URL --token TOKEN` calls. The same body, response and " +
        "refusals as `/api/v1/experiments/{id}/join`, except that no experiment id is given, so " +
        "there is no NOT_FOUND: an unknown token is TOKEN_INVALID. Also how a node refreshes its " +
        "pass. Shares that route's per-address rate limit.",
      requestBody: { required: true, content: jsonContent(joinRequestSchema) },
      responses: {
        "200": { description: "Joined", content: jsonContent(joinResponseSchema) },
        "400": errorResponse(
          "INVALID_INPUT: malformed body, or a public key that is not a usable Ed25519 key",
        ),
        "401": errorResponse("TOKEN_INVALID (unknown or malformed), TOKEN_REVOKED"),
        "403": errorResponse(
          "BANNED, NOT_ALLOWLISTED, FORBIDDEN (an aux token whose owner no longer organizes the run)",
        ),
        "409": errorResponse("EXPERIMENT_PAUSED, or CONFLICT: the public key belongs to another user"),
        "429": errorResponse("RATE_LIMITED"),
      },
    },
  },
  "/api/v1/experiments/{id}/join": {
    post: {
      tags: ["peer"],
      summary: "Join with a peer token: get an access pass, the signed config and initial peers",
      description:
        "Also how a node refreshes its pass: call it again with the same token and key before " +
        "`passExpiresAt`. Rate-limited per client address.",
      requestParams: { path: experimentIdParamSchema },
      requestBody: { required: true, content: jsonContent(joinRequestSchema) },
      responses: {
        "200": { description: "Joined", content: jsonContent(joinResponseSchema) },
        "400": errorResponse(
          "INVALID_INPUT: malformed body, or a public key that is not a usable Ed25519 key",
        ),
        "401": errorResponse("TOKEN_INVALID (unknown, malformed, or another experiment's), TOKEN_REVOKED"),
        "403": errorResponse(
          "BANNED, NOT_ALLOWLISTED, FORBIDDEN (an aux token whose owner no longer organizes the run)",
        ),
        "404": errorResponse("NOT_FOUND: no such experiment"),
        "409": errorResponse("EXPERIMENT_PAUSED, or CONFLICT: the public key belongs to another user"),
        "429": errorResponse("RATE_LIMITED"),
      },
    },
  },
  "/api/v1/experiments/{id}/peers/address": {
    post: {
      tags: ["peer"],
      summary: "Register the aux peer's listen addresses (signed aux)",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(registerAddressRequestSchema) },
      responses: {
        "200": { description: "Registered", content: jsonContent(okResponseSchema) },
        "400": errorResponse(
          "INVALID_INPUT (e.g. a multiaddr not ending with /p2p/<this node>), BODY_MISMATCH",
        ),
        ...signedErrors,
      },
    },
  },
  "/api/v1/experiments/{id}/metrics": {
    get: readMetricsOperation,
    post: {
      tags: ["peer"],
      summary: "Post one aggregated step with per-peer contributions (signed aux)",
      description:
        "Re-sending a step overwrites it. Contribution counters are cumulative and never go " +
        "backwards: each is the maximum of the stored and the reported value. Body at most 256 KiB.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(metricsReportSchema) },
      responses: {
        "200": { description: "Recorded", content: jsonContent(metricsIngestedSchema) },
        "400": errorResponse("INVALID_INPUT, BODY_MISMATCH"),
        ...signedErrors,
        "413": errorResponse("PAYLOAD_TOO_LARGE"),
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints": {
    get: listCheckpointsOperation,
    post: {
      tags: ["peer"],
      summary: "Upload a checkpoint, streamed (signed aux)",
      description:
        "The signed request's body digest is the file's SHA-256, and the query is part of the signed " +
        "scope. The upload is atomic: a refused or interrupted upload leaves nothing visible.",
      requestParams: {
        path: experimentIdParamSchema,
        query: checkpointUploadQuerySchema,
        header: signedHeader,
      },
      requestBody: {
        required: true,
        content: { "application/octet-stream": { schema: z.string().meta({ format: "binary" }) } },
      },
      responses: {
        "201": { description: "Stored", content: jsonContent(checkpointSchema) },
        "400": errorResponse(
          "INVALID_INPUT, SIZE_MISMATCH (body shorter or longer than sizeBytes), CHECKSUM_MISMATCH",
        ),
        ...signedErrors,
        "413": errorResponse("PAYLOAD_TOO_LARGE: sizeBytes is over the platform's limit"),
      },
    },
  },
};
