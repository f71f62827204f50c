import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as usersRoute from "../app/api/v1/users/route.ts";
import { registeredUserSchema } from "../src/api/schemas/accounts.ts";
import { authorizeCredentials } from "../src/server/auth/users.ts";
import { installAppContext } from "../src/server/context.ts";
import { clientIp, rateLimits } from "../src/server/http/rate-limit.ts";
import { createUserWithPassword } from "../src/server/seed/create-user-with-password.ts";
import { seedDemo, seedDemoSwarm } from "../src/server/seed/seed-demo.ts";
import { bodyOf, uniqueName } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

describe("client address for rate limits", () => {
  it("takes the hop the proxy appended to X-Forwarded-For (the last), else 'local'", () => {
    const req = (headers: Record<string, string>) => new Request("http://localhost/", { headers });
    // The first entry is whatever the client sent; the proxy appended the address it accepted.
    expect(clientIp(req({ "x-forwarded-for": "10.0.0.1, 203.0.113.9" }))).toBe("203.0.113.9");
    expect(clientIp(req({ "x-forwarded-for": " 2001:db8::1 " }))).toBe("2001:db8::1");
    expect(clientIp(req({ "x-forwarded-for": "" }))).toBe("local");
    expect(clientIp(req({}))).toBe("local");
  });
});

describe.each(testDatabaseProviders())("accounts on %s", (provider) => {
  let app: TestApp;

  beforeAll(async () => {
    app = await createTestApp(provider);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const register = (body: unknown, headers: Record<string, string> = {}) =>
    callRoute(usersRoute.POST, "/api/v1/users", { method: "POST", body, headers });

  it("registers a user whose password is stored hashed and signs in", async () => {
    const username = uniqueName("alice");
    const response = await register({ username, password: "correct horse battery" });
    expect(response.status).toBe(201);
    const user = registeredUserSchema.parse(await response.json());
    expect(user.username).toBe(username);

    const row = await app.db.user.findUniqueOrThrow({ where: { id: user.id } });
    expect(row.passwordHash).toMatch(/^scrypt\$/);
    expect(row.passwordHash).not.toContain("correct horse battery");
    expect(await authorizeCredentials(app.ctx, username, "correct horse battery")).toEqual(user);
    expect(await authorizeCredentials(app.ctx, username, "wrong horse battery")).toBeNull();
  });

  it("reports invalid usernames and passwords by field", async () => {
    const response = await register({ username: "no spaces allowed", password: "short", admin: true });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; issues: { path: string }[] } };
    expect(body.error.code).toBe("INVALID_INPUT");
    expect(body.error.issues.map((issue) => issue.path).sort()).toEqual(["", "password", "username"]);
    const tooLong = await register({ username: uniqueName("bob"), password: "x".repeat(257) });
    expect(await bodyOf(tooLong)).toMatchObject({ error: { issues: [{ path: "password" }] } });
  });

  it("refuses a taken username with CONFLICT", async () => {
    const username = uniqueName("carol");
    expect((await register({ username, password: "password one" })).status).toBe(201);
    const again = await register({ username, password: "password two" });
    expect(again.status).toBe(409);
    expect(await bodyOf(again)).toMatchObject({
      error: { code: "CONFLICT", issues: [{ path: "username" }] },
    });
    expect(await authorizeCredentials(app.ctx, username, "password one")).not.toBeNull();
  });

  it("refuses sign-ups when BARNRAISE_SIGNUP is closed", async () => {
    installAppContext({ ...app.ctx, env: { ...app.ctx.env, signup: "closed" } });
    try {
      const username = uniqueName("dave");
      const response = await register({ username, password: "long enough" });
      expect(response.status).toBe(403);
      expect(await bodyOf(response)).toMatchObject({ error: { code: "SIGNUP_CLOSED" } });
      expect(await app.db.user.count({ where: { username } })).toBe(0);
    } finally {
      installAppContext(app.ctx);
    }
  });

  it("refuses a sign-up from another site", async () => {
    const response = await register(
      { username: uniqueName("eve"), password: "long enough" },
      { origin: "https://evil.example" },
    );
    expect(response.status).toBe(403);
    expect(await bodyOf(response)).toMatchObject({ error: { code: "CROSS_SITE_REQUEST" } });
  });

  it("rate-limits sign-ups per client address, with Retry-After", async () => {
    // Each client also sends an X-Forwarded-For of its own, which the proxy keeps in front.
    let spoofed = 0;
    const from = (ip: string) => ({ "x-forwarded-for": `10.0.0.${++spoofed}, ${ip}` });
    // Every attempt counts, valid or not, so the limit also slows down username probing.
    for (let i = 0; i < rateLimits.register.points; i++) {
      expect((await register({ username: "bad name", password: "x" }, from("203.0.113.7"))).status).toBe(400);
    }
    const limited = await register(
      { username: uniqueName("frank"), password: "long enough" },
      from("203.0.113.7"),
    );
    expect(limited.status).toBe(429);
    expect(await bodyOf(limited)).toMatchObject({ error: { code: "RATE_LIMITED" } });
    const retryAfter = Number(limited.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(rateLimits.register.durationSeconds);

    const other = await register(
      { username: uniqueName("grace"), password: "long enough" },
      from("203.0.113.8"),
    );
    expect(other.status).toBe(201);
  });

  it("takes the sign-up limit from BARNRAISE_SIGNUP_LIMIT", async () => {
    installAppContext({ ...app.ctx, env: { ...app.ctx.env, signupLimitPerHour: 2 } });
    try {
      const from = { "x-forwarded-for": "203.0.113.9" };
      for (let i = 0; i < 2; i++) {
        expect((await register({ username: "bad name", password: "x" }, from)).status).toBe(400);
      }
      const limited = await register({ username: uniqueName("heidi"), password: "long enough" }, from);
      expect(limited.status).toBe(429);
    } finally {
      installAppContext(app.ctx);
    }
  });
});

describe.each(testDatabaseProviders())("seed factories on %s", (provider) => {
  let app: TestApp;

  beforeAll(async () => {
    app = await createTestApp(provider);
  });
  afterAll(async () => {
    await app.dispose();
  });

  it("creates password users with the sign-up rules", async () => {
    const username = uniqueName("seeded");
    const user = await createUserWithPassword(app.ctx, { username, password: "seeded password" });
    expect(await authorizeCredentials(app.ctx, username, "seeded password")).toEqual(user);
    await expect(createUserWithPassword(app.ctx, { username, password: "short" })).rejects.toThrow(
      /password/,
    );
    await expect(createUserWithPassword(app.ctx, { username, password: "another one" })).rejects.toThrow(
      /taken/,
    );
  });

  it("seeds the demo organizer and mnist-mlp experiment idempotently", async () => {
    const input = {
      organizerUsername: "demo-organizer",
      organizerPassword: "demo password 1",
      experimentId: "demo",
    };
    const first = await seedDemo(app.ctx, input);
    expect(first.created).toEqual({ organizer: true, experiment: true });
    expect(first.experiment).toMatchObject({ id: "demo", organizer: "demo-organizer", configVersion: 1 });
    expect(first.experiment.config.model.kind).toBe("mnist-mlp");

    const second = await seedDemo(app.ctx, { ...input, organizerPassword: "demo password 2" });
    expect(second.created).toEqual({ organizer: false, experiment: false });
    expect(second.experiment.authorityPublicKey).toBe(first.experiment.authorityPublicKey);
    expect(await app.db.user.count({ where: { username: "demo-organizer" } })).toBe(1);
    // The password printed by the latest run is the one that works.
    expect(await authorizeCredentials(app.ctx, "demo-organizer", "demo password 2")).not.toBeNull();
    expect(await authorizeCredentials(app.ctx, "demo-organizer", "demo password 1")).toBeNull();
  });

  it("seeds the demo's local swarm: an allowlisted volunteer and fresh tokens, revoking the last run's", async () => {
    await seedDemo(app.ctx, {
      organizerUsername: "demo-organizer",
      organizerPassword: "demo password 2",
      experimentId: "demo",
    });
    const input = {
      organizerUsername: "demo-organizer",
      volunteerUsername: "demo-volunteer",
      password: "demo password 2",
      experimentId: "demo",
    };
    const first = await seedDemoSwarm(app.ctx, input);
    const second = await seedDemoSwarm(app.ctx, input);
    expect(second.auxToken).not.toBe(first.auxToken);
    const tokens = await app.db.peerToken.findMany({
      where: { experimentId: "demo" },
      select: { role: true, revokedAt: true, user: { select: { username: true } } },
    });
    const live = tokens.filter((token) => token.revokedAt === null);
    expect(live.map((token) => [token.user.username, token.role]).sort()).toEqual([
      ["demo-organizer", "aux"],
      ["demo-volunteer", "trainer"],
    ]);
    expect(tokens.length - live.length).toBe(2);
    const volunteer = await app.db.user.findUniqueOrThrow({ where: { username: "demo-volunteer" } });
    const entry = await app.db.allowlistEntry.findUnique({
      where: { experimentId_userId: { experimentId: "demo", userId: volunteer.id } },
    });
    expect(entry?.status).toBe("approved");
  });
});
