import { encode } from "@auth/core/jwt";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ACTOR_NAMES,
  cookieOf,
  createCast,
  createTestUser,
  createWorld,
  type Cast,
} from "./support/actors.ts";
import { outcomeOf, routeCases } from "./support/authorization-routes.ts";
import { createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Every session route × every kind of caller. Each cell runs against a fresh experiment (with the
 * volunteers' allowlist entries and a token), so no cell depends on what another one changed.
 */

const cells = routeCases.flatMap((routeCase) =>
  ACTOR_NAMES.map((actor) => ({ routeCase, actor, expected: routeCase.expected[actor] })),
);
const mutations = routeCases.filter((routeCase) => routeCase.mutation);
const signedIn = routeCases.filter((routeCase) => routeCase.expected.visitor.startsWith("401"));
const scoped = routeCases.filter((routeCase) => routeCase.experimentScoped);

describe.each(testDatabaseProviders())("authorization matrix on %s", (provider) => {
  let app: TestApp;
  let cast: Cast;

  beforeAll(async () => {
    app = await createTestApp(provider);
    cast = await createCast(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  it.each(cells)("$routeCase.name as $actor → $expected", async ({ routeCase, actor, expected }) => {
    const world = await createWorld(app, cast);
    const response = await routeCase.call({ cast, world, cookie: cookieOf(cast, actor), headers: {} });
    expect(await outcomeOf(response)).toBe(expected);
  });

  it.each(mutations)("$name refuses a cross-site request, even the organizer's", async (routeCase) => {
    const world = await createWorld(app, cast);
    const before = await snapshot(app, world.experimentId);
    const response = await routeCase.call({
      cast,
      world,
      cookie: cast.organizer.cookie,
      headers: { origin: "https://evil.example" },
    });
    expect(await outcomeOf(response)).toBe("403 CROSS_SITE_REQUEST");
    expect(await snapshot(app, world.experimentId)).toEqual(before);
  });

  it.each(signedIn)(
    "$name treats a forged, a garbled and a deleted user's cookie as a visitor",
    async (routeCase) => {
      const forged = await encode({
        token: { sub: cast.organizer.id, username: cast.organizer.username },
        secret: "another-secret-that-is-long-enough-0123456789",
        salt: "authjs.session-token",
      });
      const deleted = await createTestUser(app);
      await app.db.user.delete({ where: { id: deleted.id } });
      for (const cookie of [
        `authjs.session-token=${forged}`,
        "authjs.session-token=not-a-jwe.at.all",
        `authjs.session-token=${cast.organizer.cookie.split("=")[1]?.slice(0, -4) ?? ""}AAAA`,
        deleted.cookie,
      ]) {
        const world = await createWorld(app, cast);
        const response = await routeCase.call({ cast, world, cookie, headers: {} });
        expect(await outcomeOf(response), cookie.slice(0, 40)).toBe("401 UNAUTHENTICATED");
      }
    },
  );

  it.each(scoped)("$name answers 404 for an unknown experiment", async (routeCase) => {
    const world = {
      experimentId: "no-such-experiment",
      approvedTokenId: "no-such-token",
      checkpointId: "no-such-checkpoint",
      webhookId: "no-such-webhook",
    };
    for (const actor of ["volunteer", "organizer"] as const) {
      const response = await routeCase.call({ cast, world, cookie: cast[actor].cookie, headers: {} });
      expect(await outcomeOf(response)).toBe("404 NOT_FOUND");
    }
  });
});

/** Everything a refused request could have changed. */
async function snapshot(app: TestApp, experimentId: string): Promise<unknown> {
  const [experiment, entries, tokens, users, experiments, alertSettings, webhooks, deliveries] =
    await Promise.all([
      app.db.experiment.findUnique({ where: { id: experimentId } }),
      app.db.allowlistEntry.findMany({ where: { experimentId }, orderBy: { id: "asc" } }),
      app.db.peerToken.findMany({ where: { experimentId }, orderBy: { id: "asc" } }),
      app.db.user.count(),
      app.db.experiment.count(),
      app.db.alertSettings.findUnique({ where: { experimentId } }),
      app.db.alertWebhook.findMany({ where: { experimentId }, orderBy: { id: "asc" } }),
      app.db.alertDelivery.count(),
    ]);
  return { experiment, entries, tokens, users, experiments, alertSettings, webhooks, deliveries };
}
