import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as entryRoute from "../app/api/v1/experiments/[id]/allowlist/[username]/route.ts";
import * as allowlistRoute from "../app/api/v1/experiments/[id]/allowlist/route.ts";
import * as joinRequestsRoute from "../app/api/v1/experiments/[id]/join-requests/route.ts";
import * as membershipRoute from "../app/api/v1/experiments/[id]/membership/route.ts";
import { allowlistEntrySchema, allowlistSchema } from "../src/api/schemas/allowlist.ts";
import { membershipSchema } from "../src/api/schemas/experiments.ts";
import { createExperiment } from "../src/server/services/create-experiment.ts";
import { bodyOf, createTestUser, uniqueName, type TestUser } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

describe.each(testDatabaseProviders())("allowlist on %s", (provider) => {
  let app: TestApp;
  let organizer: TestUser;
  let id: string;

  beforeAll(async () => {
    app = await createTestApp(provider);
    organizer = await createTestUser(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const newExperiment = async () => {
    id = (await createExperiment(app.ctx, organizer, { id: uniqueName("exp"), name: "Allowlist test" })).id;
  };
  const base = () => `/api/v1/experiments/${id}`;
  const add = (username: string) =>
    callRoute(allowlistRoute.POST, `${base()}/allowlist`, {
      method: "POST",
      body: { username },
      params: { id },
      cookie: organizer.cookie,
    });
  const setStatus = (username: string, status: string) =>
    callRoute(entryRoute.PUT, `${base()}/allowlist/${username}`, {
      method: "PUT",
      body: { status },
      params: { id, username },
      cookie: organizer.cookie,
    });
  const remove = (username: string) =>
    callRoute(entryRoute.DELETE, `${base()}/allowlist/${username}`, {
      method: "DELETE",
      params: { id, username },
      cookie: organizer.cookie,
    });
  const requestToJoin = (user: TestUser) =>
    callRoute(joinRequestsRoute.POST, `${base()}/join-requests`, {
      method: "POST",
      body: {},
      params: { id },
      cookie: user.cookie,
    });
  const membership = async (user: TestUser) => {
    const response = await callRoute(membershipRoute.GET, `${base()}/membership`, {
      params: { id },
      cookie: user.cookie,
    });
    return membershipSchema.parse(await response.json()).status;
  };
  const list = async () => {
    const response = await callRoute(allowlistRoute.GET, `${base()}/allowlist`, {
      params: { id },
      cookie: organizer.cookie,
    });
    return allowlistSchema.parse(await response.json()).entries;
  };

  it("adds a user by username (201), and approves an existing entry (200)", async () => {
    await newExperiment();
    const volunteer = await createTestUser(app);
    const created = await add(volunteer.username);
    expect(created.status).toBe(201);
    expect(allowlistEntrySchema.parse(await created.json())).toMatchObject({
      username: volunteer.username,
      status: "approved",
    });
    expect(await membership(volunteer)).toBe("approved");

    expect((await setStatus(volunteer.username, "banned")).status).toBe(200);
    const again = await add(volunteer.username);
    expect(again.status).toBe(200);
    expect(await bodyOf(again)).toMatchObject({ status: "approved" });
    expect(await app.db.allowlistEntry.count({ where: { experimentId: id } })).toBe(1);
  });

  it("refuses unknown users (404) and the organizer (400)", async () => {
    await newExperiment();
    const unknown = await add("nobody-by-that-name");
    expect(unknown.status).toBe(404);
    expect(await bodyOf(unknown)).toMatchObject({ error: { code: "NOT_FOUND" } });
    const self = await add(organizer.username);
    expect(self.status).toBe(400);
    expect(await bodyOf(self)).toMatchObject({ error: { code: "INVALID_INPUT" } });
    const ban = await setStatus(organizer.username, "banned");
    expect(ban.status).toBe(400);
    expect((await remove(organizer.username)).status).toBe(400);
    expect(await membership(organizer)).toBe("organizer");
    expect((await setStatus("nobody-by-that-name", "approved")).status).toBe(404);
    expect((await setStatus(organizer.username, "pending")).status).toBe(400);
  });

  it("runs a join request through approval, ban, unban and removal", async () => {
    await newExperiment();
    const volunteer = await createTestUser(app);
    expect(await membership(volunteer)).toBe("none");

    const requested = await requestToJoin(volunteer);
    expect(requested.status).toBe(201);
    expect(allowlistEntrySchema.parse(await requested.json()).status).toBe("pending");
    expect(await membership(volunteer)).toBe("pending");
    const twice = await requestToJoin(volunteer);
    expect(twice.status).toBe(409);

    expect(await bodyOf(await setStatus(volunteer.username, "approved"))).toMatchObject({
      status: "approved",
    });
    expect(await membership(volunteer)).toBe("approved");
    expect((await requestToJoin(volunteer)).status).toBe(409);

    expect(await bodyOf(await setStatus(volunteer.username, "banned"))).toMatchObject({ status: "banned" });
    expect(await membership(volunteer)).toBe("banned");
    expect(await bodyOf(await requestToJoin(volunteer))).toMatchObject({ error: { code: "BANNED" } });

    expect((await setStatus(volunteer.username, "approved")).status).toBe(200);
    expect(await membership(volunteer)).toBe("approved");

    const removed = await remove(volunteer.username);
    expect(removed.status).toBe(204);
    expect(await removed.text()).toBe("");
    expect(await membership(volunteer)).toBe("none");
    expect((await remove(volunteer.username)).status).toBe(404);
    // Removed (not banned): the volunteer may ask again.
    expect((await requestToJoin(volunteer)).status).toBe(201);
  });

  it("denies a join request by deleting it", async () => {
    await newExperiment();
    const volunteer = await createTestUser(app);
    await requestToJoin(volunteer);
    expect((await remove(volunteer.username)).status).toBe(204);
    expect(await list()).toEqual([]);
  });

  it("bans someone who never asked (the entry is created)", async () => {
    await newExperiment();
    const stranger = await createTestUser(app);
    expect(await bodyOf(await setStatus(stranger.username, "banned"))).toMatchObject({ status: "banned" });
    expect(await bodyOf(await requestToJoin(stranger))).toMatchObject({ error: { code: "BANNED" } });
  });

  it("lists pending requests first, then approved, then banned", async () => {
    await newExperiment();
    const users = await Promise.all(["a", "b", "c", "d", "e"].map(() => createTestUser(app)));
    const [a, b, c, d, e] = users as [TestUser, TestUser, TestUser, TestUser, TestUser];
    await setStatus(a.username, "banned");
    await add(b.username);
    await requestToJoin(c);
    await add(d.username);
    await requestToJoin(e);
    const entries = await list();
    expect(entries.map((entry) => entry.status)).toEqual([
      "pending",
      "pending",
      "approved",
      "approved",
      "banned",
    ]);
    const names = (status: string) =>
      entries
        .filter((entry) => entry.status === status)
        .map((entry) => entry.username)
        .sort();
    expect(names("pending")).toEqual([c.username, e.username].sort());
    expect(names("approved")).toEqual([b.username, d.username].sort());
    expect(names("banned")).toEqual([a.username]);
  });

  it("validates the status and the body", async () => {
    await newExperiment();
    const volunteer = await createTestUser(app);
    const pending = await setStatus(volunteer.username, "pending");
    expect(pending.status).toBe(400);
    expect(await bodyOf(pending)).toMatchObject({ error: { issues: [{ path: "status" }] } });
    const bad = await add("not a username!");
    expect(await bodyOf(bad)).toMatchObject({
      error: { code: "INVALID_INPUT", issues: [{ path: "username" }] },
    });
    const extra = await callRoute(joinRequestsRoute.POST, `${base()}/join-requests`, {
      method: "POST",
      body: { please: true },
      params: { id },
      cookie: volunteer.cookie,
    });
    expect(extra.status).toBe(400);
    expect(await membership(volunteer)).toBe("none");
  });
});
