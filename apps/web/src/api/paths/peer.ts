import { ProtocolErrorCode } from "@barnraise/protocol";
import { z } from "zod";
import type { ZodOpenApiOperationObject, ZodOpenApiPathsObject } from "zod-openapi";
import {
  checkpointEvaluationRequestSchema,
  checkpointUploadQuerySchema,
  forkTimelineRequestSchema,
  browserJoinRequestSchema,
  joinRequestSchema,
  joinResponseSchema,
  metricsIngestedSchema,
  metricsReportSchema,
  okResponseSchema,
  registerAddressRequestSchema,
  runControlResponseSchema,
  swarmStatusReportSchema,
  timelineResponseSchema,
  validatorFlagRequestSchema,
} from "../schemas/peer.ts";
import { validatorFlagSchema } from "../schemas/validator-flags.ts";
import { listValidatorFlagsOperation } from "./experiments.ts";
import { checkpointSchema, experimentIdParamSchema } from "../schemas/public.ts";
import { errorResponse, listCheckpointsOperation, readMetricsOperation } from "./public.ts";

/**
 * The API of peer and aux programs: join with a peer token, the run control any node reads, and the
 * routes an aux peer calls, with a signed request (DeDLOC I.5) in
 * `Authorization: Barnraise <signed request>`.
 */

const signedHeader = z.object({
  authorization: z.string().meta({
    description:
      "`Barnraise <signed request>`: the caller's pass, recipient = the experiment's authority " +
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

const nodeSignedErrors = {
  ...signedErrors,
  "401": errorResponse(
    `TOKEN_REVOKED, UNAUTHENTICATED (no signed request) or a signed-request rejection: ${[
      ProtocolErrorCode.PASS_BAD_SIGNATURE,
      ProtocolErrorCode.PASS_EXPIRED,
      ProtocolErrorCode.PASS_WRONG_ROLE,
      ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
      ProtocolErrorCode.REQUEST_WRONG_RECIPIENT,
      ProtocolErrorCode.REQUEST_WRONG_SCOPE,
      ProtocolErrorCode.REQUEST_CLOCK_SKEW,
    ].join(", ")}`,
  ),
  "403": errorResponse(
    "BANNED, NOT_ALLOWLISTED (a trainer whose owner is not approved), FORBIDDEN (not joined as a " +
      "trainer or aux peer, or an aux peer whose owner no longer organizes the run)",
  ),
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
          "BANNED, NOT_ALLOWLISTED, FORBIDDEN (an aux token whose owner no longer organizes the run), NODE_RETIRED (its owner retired this key)",
        ),
        "409": errorResponse(
          "EXPERIMENT_PAUSED, TOO_MANY_NODES (the token or its owner runs as many machines as the organizer allows), or CONFLICT: the public key belongs to another user",
        ),
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
          "BANNED, NOT_ALLOWLISTED, FORBIDDEN (an aux token whose owner no longer organizes the run), NODE_RETIRED (its owner retired this key)",
        ),
        "404": errorResponse("NOT_FOUND: no such experiment"),
        "409": errorResponse(
          "EXPERIMENT_PAUSED, TOO_MANY_NODES (the token or its owner runs as many machines as the organizer allows), or CONFLICT: the public key belongs to another user",
        ),
        "429": errorResponse("RATE_LIMITED"),
      },
    },
  },
  "/api/v1/experiments/{id}/browser-join": {
    post: {
      tags: ["peer"],
      summary: "Join from the signed-in volunteer's browser: an access pass for the browser's key",
      description:
        "The session is the credential (Contribute from this browser). The key's first join makes a " +
        "token for it that is never shown (`browser` in the volunteer's token list); revoking that " +
        "token stops the browser, whose later joins with the key are TOKEN_REVOKED. Also how the " +
        "browser refreshes its pass. Rate-limited per client address.",
      requestParams: { path: experimentIdParamSchema },
      requestBody: { required: true, content: jsonContent(browserJoinRequestSchema) },
      responses: {
        "200": { description: "Joined", content: jsonContent(joinResponseSchema) },
        "400": errorResponse(
          "INVALID_INPUT: malformed body, or a public key that is not a usable Ed25519 key",
        ),
        "401": errorResponse(
          "UNAUTHENTICATED (no session), TOKEN_REVOKED (the browser's token for this key)",
        ),
        "403": errorResponse(
          "BANNED, NOT_ALLOWLISTED, NODE_RETIRED (its owner retired this key), CROSS_SITE_REQUEST",
        ),
        "404": errorResponse("NOT_FOUND: no such experiment"),
        "409": errorResponse(
          "EXPERIMENT_PAUSED, TOO_MANY_NODES (the volunteer runs as many machines as the organizer allows), or CONFLICT: the public key belongs to another user",
        ),
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
        "The step is recorded in the run's current timeline if that timeline does not have it yet, " +
        "and never overwritten: a repeated step answers `stored: false` and changes nothing. A report " +
        "of an older rollback generation than the run's is STALE_GENERATION. Contribution counters " +
        "are kept per peer and session (a restarted node keeps each session's credit), cumulative, " +
        "and never go backwards: each is the maximum of the stored and the reported value. Body at " +
        "most 256 KiB.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(metricsReportSchema) },
      responses: {
        "200": { description: "Recorded", content: jsonContent(metricsIngestedSchema) },
        "400": errorResponse("INVALID_INPUT, BODY_MISMATCH"),
        ...signedErrors,
        "409": errorResponse(
          `STALE_GENERATION (the run was rolled back since), ${ProtocolErrorCode.REQUEST_REPLAYED}`,
        ),
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
        "scope. The upload is atomic: a refused or interrupted upload leaves nothing visible. The " +
        "checkpoint records the run's current timeline and config version, and its `generation`.",
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
        "409": errorResponse(
          "STALE_GENERATION (the run was rolled back since), CONFLICT (the current timeline already " +
            `has a checkpoint of this step, or a generation the run has not reached), ${ProtocolErrorCode.REQUEST_REPLAYED}`,
        ),
        "413": errorResponse("PAYLOAD_TOO_LARGE: sizeBytes is over the platform's limit"),
      },
    },
  },
  "/api/v1/experiments/{id}/checkpoints/{checkpointId}/evaluation": {
    post: {
      tags: ["peer"],
      summary: "Record a checkpoint's held-out evaluation (signed aux)",
      description:
        "The aux peer scores each checkpoint it uploaded on the dataset's test split and records the " +
        "score here; the checkpoint list (and the public page's chart) then shows it as `evaluation`. " +
        "The metric must be the one the experiment's model is judged by: accuracy for classifiers, " +
        "perplexity for language models, mae for a regression. A checkpoint's evaluation is recorded " +
        "once and never changed. Body at most 4 KiB.",
      requestParams: {
        path: experimentIdParamSchema.extend({
          checkpointId: z.string().meta({ description: "The checkpoint's id", examples: ["cm0abc"] }),
        }),
        header: signedHeader,
      },
      requestBody: { required: true, content: jsonContent(checkpointEvaluationRequestSchema) },
      responses: {
        "200": { description: "Recorded", content: jsonContent(checkpointSchema) },
        "400": errorResponse(
          "INVALID_INPUT (a metric the model is not judged by, a value out of its range, a non-finite number), BODY_MISMATCH",
        ),
        ...signedErrors,
        "404": errorResponse("NOT_FOUND: no such experiment, or no such checkpoint of it"),
        "409": errorResponse(
          `CONFLICT (the checkpoint was already evaluated), ${ProtocolErrorCode.REQUEST_REPLAYED}`,
        ),
        "413": errorResponse("PAYLOAD_TOO_LARGE"),
      },
    },
  },
  "/api/v1/experiments/{id}/control": {
    get: {
      tags: ["peer"],
      summary: "The run control, signed now (signed trainer or aux)",
      description:
        "The organizer's standing orders: version (grows with every change), status, rollback " +
        "generation and checkpoint, and the revocation list (users with a node here who are not " +
        "approved, keys whose token was revoked; at most 2000 each). Sign the request with an empty " +
        "body. Refused like a join when the caller's standing changed, but not when the run is paused.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      responses: {
        "200": { description: "The run control", content: jsonContent(runControlResponseSchema) },
        ...nodeSignedErrors,
      },
    },
  },
  "/api/v1/experiments/{id}/timelines": {
    post: {
      tags: ["peer"],
      summary: "Report that the swarm restarted from an earlier step (signed aux)",
      description:
        "When `fromStep` is behind the last step recorded in the current timeline, a new timeline " +
        "starts (a `resumed` event); otherwise nothing changes. Body at most 4 KiB.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(forkTimelineRequestSchema) },
      responses: {
        "200": { description: "The current timeline", content: jsonContent(timelineResponseSchema) },
        "400": errorResponse("INVALID_INPUT, BODY_MISMATCH"),
        ...signedErrors,
        "413": errorResponse("PAYLOAD_TOO_LARGE"),
      },
    },
  },
  "/api/v1/experiments/{id}/validator-flags": {
    get: listValidatorFlagsOperation,
    post: {
      tags: ["peer"],
      summary: "Flag a trainer whose contributions hurt (signed aux)",
      description:
        "The aux's validator steps its state by each sampled trainer's contribution and measures the " +
        "held-out loss; a trainer whose steps raised it in most of its recent samples is flagged here. " +
        "The platform keeps one flag per node with the latest evidence (and the earliest epoch of the " +
        "current run generation at which it hurt) for the organizer's manage page. Body at most 4 KiB.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(validatorFlagRequestSchema) },
      responses: {
        "200": { description: "Recorded: the node's flag", content: jsonContent(validatorFlagSchema) },
        "400": errorResponse(
          "INVALID_INPUT (a malformed PeerId, a non-finite or negative loss, a generation the run has not reached), BODY_MISMATCH",
        ),
        ...signedErrors,
        "404": errorResponse("NOT_FOUND: no such experiment, or no trainer of it with that PeerId"),
        "413": errorResponse("PAYLOAD_TOO_LARGE"),
      },
    },
  },
  "/api/v1/experiments/{id}/swarm-status": {
    post: {
      tags: ["peer"],
      summary: "The swarm's heartbeat, every 5 s (signed aux)",
      description:
        "The experiment's public view shows it as `swarm` for 30 s; without a newer one, no peer " +
        "counts as alive and the run is waiting. It also says which trainers the swarm accepts and " +
        "whether they average (My nodes counts a trainer only then), which nodes' passes the aux " +
        "refused and why (My nodes shows it), and whether the swarm has split into more than one " +
        "model (the dashboards warn, and the swarm.split alert fires). Body at most 512 KiB.",
      requestParams: { path: experimentIdParamSchema, header: signedHeader },
      requestBody: { required: true, content: jsonContent(swarmStatusReportSchema) },
      responses: {
        "200": { description: "Recorded", content: jsonContent(okResponseSchema) },
        "400": errorResponse("INVALID_INPUT, BODY_MISMATCH"),
        ...signedErrors,
        "413": errorResponse("PAYLOAD_TOO_LARGE"),
      },
    },
  },
};
