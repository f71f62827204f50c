import { canonicalJson, encodePublicKey, parseExperimentConfig } from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as experimentRoute from "../app/api/v1/experiments/[id]/route.ts";
import * as experimentsRoute from "../app/api/v1/experiments/route.ts";
import { experimentListSchema, experimentSchema } from "../src/api/schemas/experiments.ts";
import { openAuthorityKeyPair, SealedKeyError } from "../src/server/authority-keys.ts";
import { bodyOf, createTestUser, uniqueName, type TestUser } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

describe.each(testDatabaseProviders())("experiments on %s", (provider) => {
  let app: TestApp;
  let organizer: TestUser;

  beforeAll(async () => {
    app = await createTestApp(provider);
    organizer = await createTestUser(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const create = (body: unknown, init: { headers?: Record<string, string>; cookie?: string } = {}) =>
    callRoute(experimentsRoute.POST, "/api/v1/experiments", {
      method: "POST",
      body,
      cookie: init.cookie ?? organizer.cookie,
      ...(init.headers ? { headers: init.headers } : {}),
    });

  it("creates an experiment with the complete config, canonical in the database, and a sealed key", async () => {
    const id = uniqueName("mnist");
    const response = await create({
      id,
      name: "  MNIST together ",
      description: "digits",
      config: { training: { targetBatchSize: 4096 } },
    });
    expect(response.status).toBe(201);
    const experiment = experimentSchema.parse(await response.json());
    expect(experiment).toMatchObject({
      id,
      name: "MNIST together",
      description: "digits",
      status: "running",
      organizer: organizer.username,
      configVersion: 1,
      authorityKeyVersion: 1,
    });
    const expected = parseExperimentConfig({ training: { targetBatchSize: 4096 } });
    expect(experiment.config).toEqual(expected);

    const row = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    expect(row.organizerId).toBe(organizer.id);
    expect(row.config).toBe(new TextDecoder().decode(canonicalJson(expected)));
    const pair = openAuthorityKeyPair(row, app.ctx.env.sealingSecrets);
    expect(encodePublicKey(pair.publicKey)).toBe(experiment.authorityPublicKey);
    expect(row.authoritySecretKey).not.toContain(Buffer.from(pair.secretKey).toString("base64url"));
  });

  it("reports every invalid field with its path, config fields under config.", async () => {
    const response = await create({
      id: "new",
      name: "",
      config: { training: { targetBatchSize: 0 }, optimizer: { name: "adam", beta1: 2 }, extra: 1 },
      surprise: true,
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { code: string; issues: { path: string }[] } };
    expect(body.error.code).toBe("INVALID_INPUT");
    expect(body.error.issues.map((issue) => issue.path).sort()).toEqual([
      "",
      "config",
      "config.optimizer.beta1",
      "config.training.targetBatchSize",
      "id",
      "name",
    ]);
    expect(await app.db.experiment.count({ where: { id: "new" } })).toBe(0);
  });

  it("refuses a taken id with CONFLICT", async () => {
    const id = uniqueName("taken");
    expect((await create({ id, name: "first" })).status).toBe(201);
    const again = await create({ id, name: "second" });
    expect(again.status).toBe(409);
    expect(await bodyOf(again)).toMatchObject({ error: { code: "CONFLICT", issues: [{ path: "id" }] } });
    expect((await app.db.experiment.findUniqueOrThrow({ where: { id } })).name).toBe("first");
  });

  it("refuses a body over 64 KiB (413) and a body that is not JSON (415)", async () => {
    const big = await create({ id: uniqueName("big"), name: "big", description: "x".repeat(70 * 1024) });
    expect(big.status).toBe(413);
    expect(await bodyOf(big)).toMatchObject({ error: { code: "PAYLOAD_TOO_LARGE" } });

    const text = await create(JSON.stringify({ id: uniqueName("text"), name: "text" }), {
      headers: { "content-type": "text/plain" },
    });
    expect(text.status).toBe(415);
    expect(await bodyOf(text)).toMatchObject({ error: { code: "UNSUPPORTED_MEDIA_TYPE" } });

    const broken = await create("{not json", { headers: { "content-type": "application/json" } });
    expect(broken.status).toBe(400);
  });

  it("lists experiments for visitors, newest first, with peers online", async () => {
    const id = uniqueName("listed");
    await create({ id, name: "listed", config: { model: { kind: "albert-mlm" } } });
    const token = await app.db.peerToken.create({
      data: {
        experimentId: id,
        userId: organizer.id,
        role: "aux",
        tokenHash: uniqueName("h"),
        prefix: "brp_x",
      },
    });
    const now = app.ctx.now();
    for (const [key, seenAgo] of [
      ["fresh", 1_000],
      ["stale", 10 * 60_000],
    ] as const) {
      await app.db.peer.create({
        data: {
          experimentId: id,
          userId: organizer.id,
          tokenId: token.id,
          publicKey: key,
          peerId: key,
          role: "aux",
          passExpiresAt: new Date(now + 3_600_000),
          lastSeenAt: new Date(now - seenAgo),
        },
      });
    }
    const response = await callRoute(experimentsRoute.GET, "/api/v1/experiments");
    expect(response.status).toBe(200);
    const { experiments } = experimentListSchema.parse(await response.json());
    expect(experiments.find((experiment) => experiment.id === id)).toMatchObject({
      modelKind: "albert-mlm",
      peersOnline: 1,
      status: "running",
    });
    const times = experiments.map((experiment) => experiment.createdAt);
    expect(times).toEqual([...times].sort().reverse());
  });

  it("shows one experiment to visitors and 404s an unknown one", async () => {
    const id = uniqueName("shown");
    await create({ id, name: "shown" });
    const shown = await callRoute(experimentRoute.GET, `/api/v1/experiments/${id}`, { params: { id } });
    expect(experimentSchema.parse(await shown.json()).id).toBe(id);
    const missing = await callRoute(experimentRoute.GET, "/api/v1/experiments/nope", {
      params: { id: "nope" },
    });
    expect(missing.status).toBe(404);
  });

  it("rejects an experiment created by someone who is not signed in", async () => {
    const response = await create({ id: uniqueName("anon"), name: "anon" }, { cookie: "" });
    expect(response.status).toBe(401);
  });

  it("keeps the authority key sealed to the experiment", async () => {
    const id = uniqueName("sealed");
    await create({ id, name: "sealed" });
    const row = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    expect(() => openAuthorityKeyPair({ ...row, id: `${id}-copy` }, app.ctx.env.sealingSecrets)).toThrow(
      SealedKeyError,
    );
  });
});
