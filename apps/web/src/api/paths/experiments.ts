import { z } from "zod";
import type { ZodOpenApiOperationObject, ZodOpenApiPathsObject } from "zod-openapi";
import type { AppErrorCode } from "../error-codes.ts";
import {
  addToAllowlistRequestSchema,
  allowlistEntrySchema,
  allowlistSchema,
  setAllowlistStatusRequestSchema,
} from "../schemas/allowlist.ts";
import { errorResponses, mutationErrorCodes } from "../schemas/errors.ts";
import {
  createExperimentRequestSchema,
  discardedMetricPointsSchema,
  discardMetricPointsRequestSchema,
  emptyRequestSchema,
  experimentListSchema,
  experimentSchema,
  membershipSchema,
  rollBackRequestSchema,
  setExperimentStatusRequestSchema,
  updateExperimentRequestSchema,
} from "../schemas/experiments.ts";
import {
  createdPeerTokenSchema,
  createPeerTokenRequestSchema,
  peerTokenListSchema,
} from "../schemas/tokens.ts";
import { validatorFlagListSchema } from "../schemas/validator-flags.ts";

const idParam = z.string().meta({ description: "The experiment's id", examples: ["demo"] });
const experimentParams = z.object({ id: idParam });
const allowlistParams = z.object({ id: idParam, username: z.string().meta({ description: "A username" }) });
const tokenParams = z.object({ id: idParam, tokenId: z.string().meta({ description: "A token's id" }) });

const body = (schema: z.ZodType) => ({ required: true, content: { "application/json": { schema } } });
const ok = (description: string, schema: z.ZodType) => ({
  description,
  content: { "application/json": { schema } },
});
const noContent = { description: "Done; no body" };
const mutationErrors = (...codes: AppErrorCode[]) => errorResponses(...mutationErrorCodes, ...codes);
const organizerOnly = "Who: the experiment's organizer (403 FORBIDDEN for anyone else).";

/** The organizer's read of the validator's flags; the aux posts them on the same path (see peer.ts). */
export const listValidatorFlagsOperation: ZodOpenApiOperationObject = {
  tags: ["experiments"],
  summary: "Trainer nodes the validator flagged",
  description:
    `${organizerOnly} The aux's validator scores what trainers contribute by the change of held-out loss ` +
    "it causes; a node whose contributions hurt in most of its recent samples is listed here with the " +
    "evidence of its latest report and its owner's standing (ban them through the allowlist).",
  requestParams: { path: experimentParams },
  responses: {
    "200": ok("The flags, the most recently reported first", validatorFlagListSchema),
    ...errorResponses("UNAUTHENTICATED", "FORBIDDEN", "NOT_FOUND"),
  },
};

export const experimentPaths: ZodOpenApiPathsObject = {
  "/api/v1/experiments": {
    get: {
      tags: ["experiments"],
      summary: "Every experiment, newest first",
      description: "Who: anyone.",
      responses: { "200": ok("The experiments", experimentListSchema) },
    },
    post: {
      tags: ["experiments"],
      summary: "Publish an experiment",
      description:
        "Who: a signed-in user, who becomes its organizer. The config is validated with the protocol's " +
        "schema; errors name their fields (`config.training.targetBatchSize`). A new authority key pair " +
        "is made; its secret half is stored sealed.",
      requestBody: body(createExperimentRequestSchema),
      responses: {
        "201": ok("The new experiment", experimentSchema),
        ...mutationErrors("CONFLICT"),
      },
    },
  },
  "/api/v1/experiments/{id}": {
    get: {
      tags: ["experiments"],
      summary: "One experiment",
      description: "Who: anyone. The complete config and the authority public key peers verify passes with.",
      requestParams: { path: experimentParams },
      responses: { "200": ok("The experiment", experimentSchema), ...errorResponses("NOT_FOUND") },
    },
    patch: {
      tags: ["experiments"],
      summary: "Edit an experiment",
      description:
        `${organizerOnly} A config change (of the complete config) bumps configVersion. Once the run has ` +
        "trained (a checkpoint, step or contribution is recorded), a config that changes the model " +
        "architecture, the averaging strategy or the shared optimizer is refused (CONFLICT, with the " +
        "fields in issues): the trained state cannot go on under it.",
      requestParams: { path: experimentParams },
      requestBody: body(updateExperimentRequestSchema),
      responses: {
        "200": ok("The experiment", experimentSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/experiments/{id}/status": {
    post: {
      tags: ["experiments"],
      summary: "Pause or resume the run",
      description:
        `${organizerOnly} While paused, joins are refused (EXPERIMENT_PAUSED) and no node counts. ` +
        "A change bumps the run control's version, so the swarm obeys on its next poll.",
      requestParams: { path: experimentParams },
      requestBody: body(setExperimentStatusRequestSchema),
      responses: {
        "200": ok("The experiment", experimentSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/rollback": {
    post: {
      tags: ["experiments"],
      summary: "Roll the run back to a checkpoint",
      description:
        `${organizerOnly} The run's generation grows (metrics and checkpoints of older generations ` +
        "are refused with STALE_GENERATION), every node restarts from the checkpoint (the run " +
        "control names it), and a new metric timeline starts at its step: the old timeline's later " +
        "steps are shown as discarded. CONFLICT when the run changed meanwhile.",
      requestParams: { path: experimentParams },
      requestBody: body(rollBackRequestSchema),
      responses: {
        "200": ok("The experiment", experimentSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/experiments/{id}/metrics/discard": {
    post: {
      tags: ["experiments"],
      summary: "Discard or restore loss-curve points",
      description:
        `${organizerOnly} Marks the points of steps fromStep to toStep of a timeline (the run's current ` +
        "one by default) discarded, or restores them. A discarded point is in no view (the metrics API, " +
        "the dashboard, alerts) and no longer counts as the run's last step when the platform judges how " +
        "far a report may jump ahead; its step stays taken, so a report of it again is not stored. " +
        "INVALID_INPUT for a range that ends before it starts or a timeline the run has not reached.",
      requestParams: { path: experimentParams },
      requestBody: body(discardMetricPointsRequestSchema),
      responses: {
        "200": ok("What changed", discardedMetricPointsSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/authority-key": {
    post: {
      tags: ["experiments"],
      summary: "Rotate the authority key",
      description:
        `${organizerOnly} The old key signs a rotation certificate naming the new one, listed in join ` +
        "and run control answers (`authorityRotations`), so running nodes follow the new key and fetch " +
        "new passes within seconds. Passes of the old key issued before the rotation, and signed " +
        "requests addressed to the old key, are taken for 5 minutes after it; then only the new key counts.",
      requestParams: { path: experimentParams },
      requestBody: body(emptyRequestSchema),
      responses: {
        "200": ok("The experiment with its new key", experimentSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/experiments/{id}/allowlist": {
    get: {
      tags: ["allowlist"],
      summary: "The allowlist",
      description: `${organizerOnly} Join requests (pending) first, then approved users, then banned ones.`,
      requestParams: { path: experimentParams },
      responses: {
        "200": ok("The entries", allowlistSchema),
        ...errorResponses("UNAUTHENTICATED", "FORBIDDEN", "NOT_FOUND"),
      },
    },
    post: {
      tags: ["allowlist"],
      summary: "Allowlist a user",
      description:
        `${organizerOnly} An existing entry (a pending request or a ban) becomes approved (200); ` +
        "otherwise a new approved entry is made (201). The organizer needs no entry (INVALID_INPUT).",
      requestParams: { path: experimentParams },
      requestBody: body(addToAllowlistRequestSchema),
      responses: {
        "200": ok("The existing entry, now approved", allowlistEntrySchema),
        "201": ok("The new entry", allowlistEntrySchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/allowlist/{username}": {
    put: {
      tags: ["allowlist"],
      summary: "Approve, ban or unban a user",
      description:
        `${organizerOnly} Creates the entry if there is none. The organizer cannot be banned. ` +
        "Bumps the run control's version: a banned user's nodes are refused by the swarm.",
      requestParams: { path: allowlistParams },
      requestBody: body(setAllowlistStatusRequestSchema),
      responses: {
        "200": ok("The entry", allowlistEntrySchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND"),
      },
    },
    delete: {
      tags: ["allowlist"],
      summary: "Deny a request or remove a user from the list",
      description:
        `${organizerOnly} 404 when the user has no entry. Bumps the run control's version: the ` +
        "user's nodes are refused by the swarm until approved again.",
      requestParams: { path: allowlistParams },
      responses: {
        "204": noContent,
        ...errorResponses("UNAUTHENTICATED", "CROSS_SITE_REQUEST", "INVALID_INPUT", "FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/join-requests": {
    post: {
      tags: ["allowlist"],
      summary: "Ask to join",
      description:
        "Who: a signed-in user. Makes a pending entry for the organizer to approve. CONFLICT when the " +
        "user already has an entry or organizes the experiment; BANNED when banned.",
      requestParams: { path: experimentParams },
      requestBody: body(emptyRequestSchema),
      responses: {
        "201": ok("The pending entry", allowlistEntrySchema),
        ...mutationErrors("NOT_FOUND", "CONFLICT", "BANNED"),
      },
    },
  },
  "/api/v1/experiments/{id}/membership": {
    get: {
      tags: ["allowlist"],
      summary: "What the signed-in user is to the experiment",
      description: "Who: a signed-in user.",
      requestParams: { path: experimentParams },
      responses: {
        "200": ok("The membership", membershipSchema),
        ...errorResponses("UNAUTHENTICATED", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/tokens": {
    get: {
      tags: ["tokens"],
      summary: "The caller's peer tokens",
      description: "Who: a signed-in user; lists only their own tokens, never the secrets.",
      requestParams: { path: experimentParams },
      responses: {
        "200": ok("The tokens, newest first", peerTokenListSchema),
        ...errorResponses("UNAUTHENTICATED", "NOT_FOUND"),
      },
    },
    post: {
      tags: ["tokens"],
      summary: "Create a peer token",
      description:
        "Who: for role trainer, an approved user or the organizer (NOT_ALLOWLISTED or BANNED otherwise); " +
        "for role aux, the organizer (FORBIDDEN otherwise). The secret is in this response only.",
      requestParams: { path: experimentParams },
      requestBody: body(createPeerTokenRequestSchema),
      responses: {
        "201": ok("The token with its secret", createdPeerTokenSchema),
        ...mutationErrors("NOT_FOUND", "FORBIDDEN", "NOT_ALLOWLISTED", "BANNED"),
      },
    },
  },
  "/api/v1/experiments/{id}/tokens/{tokenId}": {
    delete: {
      tags: ["tokens"],
      summary: "Revoke a peer token",
      description:
        "Who: the token's owner or the experiment's organizer. Idempotent: revoking again changes nothing. " +
        "Nodes that joined with it stop counting and cannot renew their pass; the run control's " +
        "version grows, and the swarm refuses every pass issued on the token (the nodes may join again " +
        "with another token).",
      requestParams: { path: tokenParams },
      responses: {
        "204": noContent,
        ...errorResponses("UNAUTHENTICATED", "CROSS_SITE_REQUEST", "FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
};
