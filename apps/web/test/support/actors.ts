import { parseExperimentConfig } from "@barnraise/protocol";
import { createAlertWebhook } from "../../src/server/services/create-alert-webhook.ts";
import { createExperiment } from "../../src/server/services/create-experiment.ts";
import { generatePeerToken } from "../../src/server/services/peer-tokens.ts";
import { sessionCookie, type TestApp } from "./test-app.ts";

/**
 * The people of the authorization tests: an organizer and volunteers in every allowlist state,
 * with their session cookies, and fresh experiments to act on.
 */

export const ACTOR_NAMES = ["visitor", "volunteer", "pending", "approved", "banned", "organizer"] as const;
export type ActorName = (typeof ACTOR_NAMES)[number];

export interface TestUser {
  readonly id: string;
  readonly username: string;
  /** The Cookie header of this user's session. */
  readonly cookie: string;
}

export type Cast = Record<Exclude<ActorName, "visitor">, TestUser>;

let counter = 0;
/** A name no other test in this process uses. */
export function uniqueName(prefix: string): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

/** A user without a password (sessions are minted directly), with a session cookie. */
export async function createTestUser(app: TestApp, username = uniqueName("user")): Promise<TestUser> {
  const user = await app.db.user.create({ data: { username }, select: { id: true, username: true } });
  return { ...user, cookie: await sessionCookie(user) };
}

export async function createCast(app: TestApp): Promise<Cast> {
  const [organizer, volunteer, pending, approved, banned] = await Promise.all(
    ["organizer", "volunteer", "pending", "approved", "banned"].map((role) =>
      createTestUser(app, uniqueName(role)),
    ),
  );
  if (!organizer || !volunteer || !pending || !approved || !banned) throw new Error("cast incomplete");
  return { organizer, volunteer, pending, approved, banned };
}

/** The Cookie header an actor sends: none for the visitor. */
export function cookieOf(cast: Cast, actor: ActorName): string | undefined {
  return actor === "visitor" ? undefined : cast[actor].cookie;
}

export interface World {
  readonly experimentId: string;
  /** A trainer token of the approved volunteer. */
  readonly approvedTokenId: string;
  /** A checkpoint of the run (a row only: no file), to roll back to. */
  readonly checkpointId: string;
  /** An alert webhook of the run (pointing at a closed port). */
  readonly webhookId: string;
}

/**
 * A new experiment organized by the cast's organizer, with the pending, approved and banned
 * volunteers' entries, one trainer token of the approved volunteer, one checkpoint and one webhook.
 */
export async function createWorld(app: TestApp, cast: Cast): Promise<World> {
  const experiment = await createExperiment(app.ctx, cast.organizer, {
    id: uniqueName("exp"),
    name: "Authorization test",
    config: parseExperimentConfig({}),
  });
  await app.db.allowlistEntry.createMany({
    data: (["pending", "approved", "banned"] as const).map((status) => ({
      experimentId: experiment.id,
      userId: cast[status].id,
      status,
    })),
  });
  const secret = generatePeerToken();
  const token = await app.db.peerToken.create({
    data: {
      experimentId: experiment.id,
      userId: cast.approved.id,
      role: "trainer",
      tokenHash: secret.tokenHash,
      prefix: secret.prefix,
    },
  });
  const checkpoint = await app.db.checkpoint.create({
    data: {
      experimentId: experiment.id,
      step: 10,
      sizeBytes: 1n,
      sha256: "0".repeat(64),
      storageKey: `${experiment.id}/world.ckpt`,
      uploadedBy: "12D3KooWworld",
    },
  });
  const { webhook } = await createAlertWebhook(app.ctx, cast.organizer, experiment.id, {
    url: "http://127.0.0.1:9/alerts",
    events: ["checkpoint.uploaded"],
  });
  return {
    experimentId: experiment.id,
    approvedTokenId: token.id,
    checkpointId: checkpoint.id,
    webhookId: webhook.id,
  };
}

/** The JSON body of a response, typed loosely for assertions. */
export async function bodyOf(response: Response): Promise<Record<string, unknown>> {
  return (await response.json()) as Record<string, unknown>;
}

/** The error code of an error response. */
export async function errorCodeOf(response: Response): Promise<string | undefined> {
  const body = (await response.json()) as { error?: { code?: string } };
  return body.error?.code;
}
