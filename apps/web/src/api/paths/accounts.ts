import type { ZodOpenApiPathsObject } from "zod-openapi";
import { registeredUserSchema, registerUserRequestSchema } from "../schemas/accounts.ts";
import { errorResponses } from "../schemas/errors.ts";
import { nodeListSchema } from "../schemas/nodes.ts";

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
        "`reason`: experiment_paused, banned, not_allowlisted, token_revoked, pass_expired, stale " +
        "(not seen for 2 minutes) or not_averaging (a trainer whose samples went into no collaborative step " +
        "for a while), checked in that order. Who: a signed-in user.",
      responses: {
        "200": { description: "The nodes", content: { "application/json": { schema: nodeListSchema } } },
        ...errorResponses("UNAUTHENTICATED"),
      },
    },
  },
};
