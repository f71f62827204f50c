import * as alertTest from "../../app/api/v1/experiments/[id]/alerts/test/route.ts";
import * as alertWebhook from "../../app/api/v1/experiments/[id]/alerts/webhooks/[webhookId]/route.ts";
import * as alertWebhooks from "../../app/api/v1/experiments/[id]/alerts/webhooks/route.ts";
import * as alerts from "../../app/api/v1/experiments/[id]/alerts/route.ts";
import * as allowlistUser from "../../app/api/v1/experiments/[id]/allowlist/[username]/route.ts";
import * as allowlist from "../../app/api/v1/experiments/[id]/allowlist/route.ts";
import * as authorityKey from "../../app/api/v1/experiments/[id]/authority-key/route.ts";
import * as joinRequests from "../../app/api/v1/experiments/[id]/join-requests/route.ts";
import * as membership from "../../app/api/v1/experiments/[id]/membership/route.ts";
import * as discardMetrics from "../../app/api/v1/experiments/[id]/metrics/discard/route.ts";
import * as rollback from "../../app/api/v1/experiments/[id]/rollback/route.ts";
import * as experiment from "../../app/api/v1/experiments/[id]/route.ts";
import * as status from "../../app/api/v1/experiments/[id]/status/route.ts";
import * as token from "../../app/api/v1/experiments/[id]/tokens/[tokenId]/route.ts";
import * as tokens from "../../app/api/v1/experiments/[id]/tokens/route.ts";
import * as validatorFlags from "../../app/api/v1/experiments/[id]/validator-flags/route.ts";
import * as experiments from "../../app/api/v1/experiments/route.ts";
import * as myAlerts from "../../app/api/v1/me/alerts/route.ts";
import * as myNodes from "../../app/api/v1/me/nodes/route.ts";
import * as users from "../../app/api/v1/users/route.ts";
import { uniqueName, type ActorName, type Cast, type World } from "./actors.ts";
import { callRoute } from "./test-app.ts";

/**
 * Every session route of the API, as a row of the authorization matrix: how to call it against a
 * world, and the status (and error code) each actor must get.
 */

export interface CallContext {
  readonly cast: Cast;
  readonly world: World;
  readonly cookie: string | undefined;
  readonly headers: Record<string, string>;
}

export interface RouteCase {
  readonly name: string;
  /** Whether the route changes state (and so must refuse cross-site requests). */
  readonly mutation: boolean;
  /** Whether the route is about one experiment (and so must answer 404 for an unknown one). */
  readonly experimentScoped: boolean;
  readonly expected: Record<ActorName, string>;
  call(context: CallContext): Promise<Response>;
}

const organizerOnly = (success: string): Record<ActorName, string> => ({
  visitor: "401 UNAUTHENTICATED",
  volunteer: "403 FORBIDDEN",
  pending: "403 FORBIDDEN",
  approved: "403 FORBIDDEN",
  banned: "403 FORBIDDEN",
  organizer: success,
});

const anyUser = (success: string): Record<ActorName, string> => ({
  visitor: "401 UNAUTHENTICATED",
  volunteer: success,
  pending: success,
  approved: success,
  banned: success,
  organizer: success,
});

/** Sign-ups come from distinct addresses, so the matrix never meets the sign-up rate limit. */
let signUps = 0;
const nextSignUpAddress = () => `198.51.100.${String((signUps++ % 250) + 1)}`;

type Handler<P> = (req: Request, context: { params: Promise<P> }) => Promise<Response>;

/** A call of `handler` at the path and params `target` picks in the world, as the cell's actor. */
function calling<P>(
  handler: Handler<P>,
  target: (c: CallContext) => { path: string; params: P },
  request: { method?: string; body?: unknown } = {},
): (c: CallContext) => Promise<Response> {
  return (c) => {
    const { path, params } = target(c);
    return callRoute(handler, path, { ...request, params, cookie: c.cookie, headers: c.headers });
  };
}

/** The experiment's path plus `suffix`, with its id as the params. */
const at =
  (suffix = "") =>
  (c: CallContext) => ({
    path: `/api/v1/experiments/${c.world.experimentId}${suffix}`,
    params: { id: c.world.experimentId },
  });
const atEntry = (c: CallContext) => ({
  path: `/api/v1/experiments/${c.world.experimentId}/allowlist/${c.cast.pending.username}`,
  params: { id: c.world.experimentId, username: c.cast.pending.username },
});
const atToken = (c: CallContext) => ({
  path: `/api/v1/experiments/${c.world.experimentId}/tokens/${c.world.approvedTokenId}`,
  params: { id: c.world.experimentId, tokenId: c.world.approvedTokenId },
});
const atWebhook = (c: CallContext) => ({
  path: `/api/v1/experiments/${c.world.experimentId}/alerts/webhooks/${c.world.webhookId}`,
  params: { id: c.world.experimentId, webhookId: c.world.webhookId },
});
const nowhere = (path: string) => () => ({ path, params: {} });

export const routeCases: readonly RouteCase[] = [
  {
    name: "POST /users",
    mutation: true,
    experimentScoped: false,
    expected: { ...anyUser("201"), visitor: "201" },
    call: (c) =>
      callRoute(users.POST, "/api/v1/users", {
        method: "POST",
        body: { username: uniqueName("new"), password: "long enough password" },
        cookie: c.cookie,
        headers: { "x-forwarded-for": nextSignUpAddress(), ...c.headers },
      }),
  },
  {
    name: "POST /experiments",
    mutation: true,
    experimentScoped: false,
    expected: anyUser("201"),
    call: (c) =>
      calling(experiments.POST, nowhere("/api/v1/experiments"), {
        method: "POST",
        body: { id: uniqueName("created"), name: "New run" },
      })(c),
  },
  {
    name: "PATCH /experiments/{id}",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(experiment.PATCH, at(), { method: "PATCH", body: { name: "Renamed" } }),
  },
  {
    name: "POST /experiments/{id}/status",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(status.POST, at("/status"), { method: "POST", body: { status: "paused" } }),
  },
  {
    name: "POST /experiments/{id}/rollback",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: (c) =>
      calling(rollback.POST, at("/rollback"), {
        method: "POST",
        body: { checkpointId: c.world.checkpointId },
      })(c),
  },
  {
    name: "POST /experiments/{id}/metrics/discard",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(discardMetrics.POST, at("/metrics/discard"), {
      method: "POST",
      body: { fromStep: 0, toStep: 10, discarded: true },
    }),
  },
  {
    name: "POST /experiments/{id}/authority-key",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(authorityKey.POST, at("/authority-key"), { method: "POST", body: {} }),
  },
  {
    name: "GET /experiments/{id}/allowlist",
    mutation: false,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(allowlist.GET, at("/allowlist")),
  },
  {
    name: "POST /experiments/{id}/allowlist",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("201"),
    call: (c) =>
      calling(allowlist.POST, at("/allowlist"), {
        method: "POST",
        body: { username: c.cast.volunteer.username },
      })(c),
  },
  {
    name: "PUT /experiments/{id}/allowlist/{username}",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(allowlistUser.PUT, atEntry, { method: "PUT", body: { status: "banned" } }),
  },
  {
    name: "DELETE /experiments/{id}/allowlist/{username}",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("204"),
    call: calling(allowlistUser.DELETE, atEntry, { method: "DELETE" }),
  },
  {
    name: "POST /experiments/{id}/join-requests",
    mutation: true,
    experimentScoped: true,
    expected: {
      visitor: "401 UNAUTHENTICATED",
      volunteer: "201",
      pending: "409 CONFLICT",
      approved: "409 CONFLICT",
      banned: "403 BANNED",
      organizer: "409 CONFLICT",
    },
    call: calling(joinRequests.POST, at("/join-requests"), { method: "POST", body: {} }),
  },
  {
    name: "GET /experiments/{id}/membership",
    mutation: false,
    experimentScoped: true,
    expected: anyUser("200"),
    call: calling(membership.GET, at("/membership")),
  },
  {
    name: "GET /experiments/{id}/tokens",
    mutation: false,
    experimentScoped: true,
    expected: anyUser("200"),
    call: calling(tokens.GET, at("/tokens")),
  },
  {
    name: "POST /experiments/{id}/tokens (trainer)",
    mutation: true,
    experimentScoped: true,
    expected: {
      visitor: "401 UNAUTHENTICATED",
      volunteer: "403 NOT_ALLOWLISTED",
      pending: "403 NOT_ALLOWLISTED",
      approved: "201",
      banned: "403 BANNED",
      organizer: "201",
    },
    call: calling(tokens.POST, at("/tokens"), { method: "POST", body: { label: "laptop" } }),
  },
  {
    name: "POST /experiments/{id}/tokens (aux)",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("201"),
    call: calling(tokens.POST, at("/tokens"), { method: "POST", body: { role: "aux" } }),
  },
  {
    name: "DELETE /experiments/{id}/tokens/{tokenId}",
    mutation: true,
    experimentScoped: true,
    expected: { ...organizerOnly("204"), approved: "204" },
    call: calling(token.DELETE, atToken, { method: "DELETE" }),
  },
  {
    name: "GET /me/nodes",
    mutation: false,
    experimentScoped: false,
    expected: anyUser("200"),
    call: calling(myNodes.GET, nowhere("/api/v1/me/nodes")),
  },
  {
    name: "GET /experiments/{id}/validator-flags",
    mutation: false,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(validatorFlags.GET, at("/validator-flags")),
  },
  {
    name: "GET /experiments/{id}/alerts",
    mutation: false,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(alerts.GET, at("/alerts")),
  },
  {
    name: "PUT /experiments/{id}/alerts",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("200"),
    call: calling(alerts.PUT, at("/alerts"), { method: "PUT", body: { stalledAfterMinutes: 15 } }),
  },
  {
    name: "POST /experiments/{id}/alerts/webhooks",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("201"),
    call: calling(alertWebhooks.POST, at("/alerts/webhooks"), {
      method: "POST",
      body: { url: "https://hooks.example.org/barnraise", events: ["run.stalled"] },
    }),
  },
  {
    name: "DELETE /experiments/{id}/alerts/webhooks/{webhookId}",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("204"),
    call: calling(alertWebhook.DELETE, atWebhook, { method: "DELETE" }),
  },
  {
    // The test platform has no SMTP server: the organizer is told so.
    name: "POST /experiments/{id}/alerts/test",
    mutation: true,
    experimentScoped: true,
    expected: organizerOnly("409 CONFLICT"),
    call: calling(alertTest.POST, at("/alerts/test"), { method: "POST", body: { email: true } }),
  },
  {
    name: "GET /me/alerts",
    mutation: false,
    experimentScoped: false,
    expected: anyUser("200"),
    call: calling(myAlerts.GET, nowhere("/api/v1/me/alerts")),
  },
  {
    name: "PUT /me/alerts",
    mutation: true,
    experimentScoped: false,
    expected: anyUser("200"),
    call: calling(myAlerts.PUT, nowhere("/api/v1/me/alerts"), {
      method: "PUT",
      body: { email: "volunteer@example.org" },
    }),
  },
];

/** "201" or "403 FORBIDDEN": a response's status, and its error code if it is an error. */
export async function outcomeOf(response: Response): Promise<string> {
  if (response.status < 400) return String(response.status);
  const body = (await response.json()) as { error?: { code?: string } };
  return `${response.status} ${body.error?.code ?? "?"}`;
}
