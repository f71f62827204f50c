import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as tokenRoute from "../app/api/v1/experiments/[id]/tokens/[tokenId]/route.ts";
import * as tokensRoute from "../app/api/v1/experiments/[id]/tokens/route.ts";
import { createdPeerTokenSchema, peerTokenListSchema } from "../src/api/schemas/tokens.ts";
import { hashPeerToken, PEER_TOKEN_PATTERN } from "../src/server/services/peer-tokens.ts";
import { bodyOf, createCast, createWorld, type Cast, type TestUser } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

describe.each(testDatabaseProviders())("peer tokens on %s", (provider) => {
  let app: TestApp;
  let cast: Cast;

  beforeAll(async () => {
    app = await createTestApp(provider);
    cast = await createCast(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const create = (id: string, user: TestUser, body: unknown) =>
    callRoute(tokensRoute.POST, `/api/v1/experiments/${id}/tokens`, {
      method: "POST",
      body,
      params: { id },
      cookie: user.cookie,
    });
  const list = async (id: string, user: TestUser) => {
    const response = await callRoute(tokensRoute.GET, `/api/v1/experiments/${id}/tokens`, {
      params: { id },
      cookie: user.cookie,
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as unknown;
    return { body, tokens: peerTokenListSchema.parse(body).tokens };
  };
  const revoke = (id: string, user: TestUser, tokenId: string) =>
    callRoute(tokenRoute.DELETE, `/api/v1/experiments/${id}/tokens/${tokenId}`, {
      method: "DELETE",
      params: { id, tokenId },
      cookie: user.cookie,
    });

  it("shows the secret once and stores only its hash", async () => {
    const { experimentId } = await createWorld(app, cast);
    const response = await create(experimentId, cast.approved, { label: "  gaming rig  " });
    expect(response.status).toBe(201);
    const created = createdPeerTokenSchema.parse(await response.json());
    expect(created).toMatchObject({
      label: "gaming rig",
      role: "trainer",
      lastUsedAt: null,
      revokedAt: null,
    });
    expect(created.token).toMatch(PEER_TOKEN_PATTERN);
    expect(created.token.startsWith(created.prefix)).toBe(true);

    const row = await app.db.peerToken.findUniqueOrThrow({ where: { id: created.id } });
    expect(row.tokenHash).toBe(hashPeerToken(created.token));
    const secretPart = created.token.slice(created.prefix.length);
    expect(JSON.stringify(row)).not.toContain(secretPart);

    const { body, tokens } = await list(experimentId, cast.approved);
    expect(tokens.map((token) => token.id)).toContain(created.id);
    expect(JSON.stringify(body)).not.toContain(secretPart);
    expect(JSON.stringify(body)).not.toContain(row.tokenHash);
    for (const token of tokens) expect(Object.keys(token)).not.toContain("token");
  });

  it("lists only the caller's own tokens, newest first", async () => {
    const world = await createWorld(app, cast);
    const mine = createdPeerTokenSchema.parse(
      await (await create(world.experimentId, cast.organizer, { role: "aux", label: "aux-1" })).json(),
    );
    const { tokens } = await list(world.experimentId, cast.organizer);
    expect(tokens.map((token) => token.id)).toEqual([mine.id]);
    expect(tokens[0]).toMatchObject({ role: "aux", label: "aux-1" });
    const theirs = await list(world.experimentId, cast.approved);
    expect(theirs.tokens.map((token) => token.id)).toEqual([world.approvedTokenId]);
    expect((await list(world.experimentId, cast.volunteer)).tokens).toEqual([]);
  });

  it("validates the label and the role", async () => {
    const { experimentId } = await createWorld(app, cast);
    const long = await create(experimentId, cast.approved, { label: "x".repeat(65) });
    expect(await bodyOf(long)).toMatchObject({
      error: { code: "INVALID_INPUT", issues: [{ path: "label" }] },
    });
    const role = await create(experimentId, cast.approved, { role: "admin" });
    expect(await bodyOf(role)).toMatchObject({
      error: { code: "INVALID_INPUT", issues: [{ path: "role" }] },
    });
    expect(await app.db.peerToken.count({ where: { experimentId } })).toBe(1);
  });

  it("explains why a volunteer may not create a token", async () => {
    const { experimentId } = await createWorld(app, cast);
    expect(await bodyOf(await create(experimentId, cast.pending, {}))).toMatchObject({
      error: { code: "NOT_ALLOWLISTED", message: expect.stringMatching(/not been approved/) as unknown },
    });
    expect(await bodyOf(await create(experimentId, cast.volunteer, {}))).toMatchObject({
      error: { code: "NOT_ALLOWLISTED", message: expect.stringMatching(/ask to join/) as unknown },
    });
    expect(await bodyOf(await create(experimentId, cast.approved, { role: "aux" }))).toMatchObject({
      error: { code: "FORBIDDEN" },
    });
  });

  it("revokes idempotently, keeping the first revocation time", async () => {
    const { experimentId, approvedTokenId } = await createWorld(app, cast);
    const first = await revoke(experimentId, cast.approved, approvedTokenId);
    expect(first.status).toBe(204);
    const revokedAt = (await app.db.peerToken.findUniqueOrThrow({ where: { id: approvedTokenId } }))
      .revokedAt;
    expect(revokedAt).toBeInstanceOf(Date);

    const second = await revoke(experimentId, cast.approved, approvedTokenId);
    expect(second.status).toBe(204);
    const after = await app.db.peerToken.findUniqueOrThrow({ where: { id: approvedTokenId } });
    expect(after.revokedAt).toEqual(revokedAt);
    const { tokens } = await list(experimentId, cast.approved);
    expect(tokens[0]?.revokedAt).toBe(revokedAt?.toISOString());
  });

  it("lets the organizer revoke a volunteer's token, and nobody else", async () => {
    const { experimentId, approvedTokenId } = await createWorld(app, cast);
    const stranger = await revoke(experimentId, cast.volunteer, approvedTokenId);
    expect(stranger.status).toBe(403);
    expect(
      (await app.db.peerToken.findUniqueOrThrow({ where: { id: approvedTokenId } })).revokedAt,
    ).toBeNull();
    expect((await revoke(experimentId, cast.organizer, approvedTokenId)).status).toBe(204);
    expect(
      (await app.db.peerToken.findUniqueOrThrow({ where: { id: approvedTokenId } })).revokedAt,
    ).not.toBeNull();
  });

  it("answers 404 for a token of another experiment, even to its owner", async () => {
    const one = await createWorld(app, cast);
    const other = await createWorld(app, cast);
    const response = await revoke(other.experimentId, cast.approved, one.approvedTokenId);
    expect(response.status).toBe(404);
    expect(
      (await app.db.peerToken.findUniqueOrThrow({ where: { id: one.approvedTokenId } })).revokedAt,
    ).toBeNull();
    expect((await revoke(one.experimentId, cast.approved, "no-such-token")).status).toBe(404);
  });
});
