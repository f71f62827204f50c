import type { ZodOpenApiPathsObject } from "zod-openapi";
import { registeredUserSchema, registerUserRequestSchema } from "../schemas/accounts.ts";
import { errorResponses } from "../schemas/errors.ts";
import { z } from "zod";
import { nodeListSchema, retiredNodeSchema } from "../schemas/nodes.ts";

export const accountPaths: ZodOpenApiPathsObject = {
  "/api/v1/users": {
    post: {
      tags: ["accounts"],
      summary: "Sign up with a username and password",
      description:
        "Anyone, when BARNRAISE_SIGNUP is `open`. Rate-limited per client address (429 with Retry-After). " +
        "Sign in afterwards through Auth.js (`/api/auth/callback/credentials`).",
      requestBody: { required: true, content: { "application/json": { schema: registerUserRequestSchema } } },
      responses: {
        "201": {
          description: "The new account",
          content: { "application/json": { schema: registeredUserSchema } },
        },
        ...errorResponses(
          "INVALID_INPUT",
          "CONFLICT",
          "SIGNUP_CLOSED",
          "CROSS_SITE_REQUEST",
          "RATE_LIMITED",
          "PAYLOAD_TOO_LARGE",
          "UNSUPPORTED_MEDIA_TYPE",
        ),
      },
    },
  },
  "/api/v1/me/nodes": {
    get: {
      tags: ["nodes"],
      summary: "The signed-in user's nodes",
      description:
        "Every peer the user runs, in every experiment, with `counted` and, when it is not counted, the " +
        "`reason`: retired, experiment_paused, banned, not_allowlisted, token_revoked, pass_expired, stale " +
        "(not seen for 2 minutes), refused_by_swarm, not_in_swarm, joining or not_averaging (a trainer whose " +
        "samples went into no collaborative step for a while), checked in that order. Who: a signed-in user.",
      responses: {
        "200": { description: "The nodes", content: { "application/json": { schema: nodeListSchema } } },
        ...errorResponses("UNAUTHENTICATED"),
      },
    },
  },
  "/api/v1/me/nodes/{nodeId}/retire": {
    post: {
      tags: ["nodes"],
      summary: "Retire one of the signed-in user's machines",
      description:
        "Its key may not join again (NODE_RETIRED), and it gives up its place under the experiment's " +
        "limits of machines per token and per volunteer at once. Retiring a retired node changes nothing. " +
        "Who: the node's owner (anyone else gets NOT_FOUND).",
      requestParams: { path: z.strictObject({ nodeId: z.string() }) },
      responses: {
        "200": { description: "Retired", content: { "application/json": { schema: retiredNodeSchema } } },
        ...errorResponses("UNAUTHENTICATED", "NOT_FOUND", "CROSS_SITE_REQUEST"),
      },
    },
  },
};
