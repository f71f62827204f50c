import { encodePublicKey, parseExperimentConfig } from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as authorityKeyRoute from "../app/api/v1/experiments/[id]/authority-key/route.ts";
import * as experimentRoute from "../app/api/v1/experiments/[id]/route.ts";
import * as statusRoute from "../app/api/v1/experiments/[id]/status/route.ts";
import { experimentSchema } from "../src/api/schemas/experiments.ts";
import { openAuthorityKeyPair, SealedKeyError } from "../src/server/authority-keys.ts";
import { createExperiment } from "../src/server/services/create-experiment.ts";
import { bodyOf, createTestUser, uniqueName, type TestUser } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

describe.each(testDatabaseProviders())("experiment updates on %s", (provider) => {
  let app: TestApp;
  let organizer: TestUser;

  beforeAll(async () => {
    app = await createTestApp(provider);
    organizer = await createTestUser(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const newExperiment = async (config: object = {}) =>
    (
      await createExperiment(app.ctx, organizer, {
        id: uniqueName("exp"),
        name: "Before",
        config: parseExperimentConfig(config),
      })
    ).id;

  const patch = async (id: string, body: unknown) => {
    const response = await callRoute(experimentRoute.PATCH, `/api/v1/experiments/${id}`, {
      method: "PATCH",
      body,
      params: { id },
      cookie: organizer.cookie,
    });
    return { response, body: (await response.json()) as unknown };
  };

  it("renames without touching the config version", async () => {
    const id = await newExperiment();
    const { response, body } = await patch(id, { name: "After", description: "now described" });
    expect(response.status).toBe(200);
    expect(experimentSchema.parse(body)).toMatchObject({
      name: "After",
      description: "now described",
      configVersion: 1,
    });
  });

  it("bumps configVersion only when the complete config changes", async () => {
    const id = await newExperiment({ training: { targetBatchSize: 2048 } });
    // The same config spelt differently (defaults written out, keys reordered) is no change.
    const same = await patch(id, {
      config: { optimizer: { name: "adam", learningRate: 0.001 }, training: { targetBatchSize: 2048 } },
    });
    expect(experimentSchema.parse(same.body).configVersion).toBe(1);

    const changed = await patch(id, { config: { training: { targetBatchSize: 4096 } } });
    const experiment = experimentSchema.parse(changed.body);
    expect(experiment.configVersion).toBe(2);
    expect(experiment.config.training.targetBatchSize).toBe(4096);

    const again = await patch(id, { config: { training: { targetBatchSize: 4096 } } });
    expect(experimentSchema.parse(again.body).configVersion).toBe(2);
    const back = await patch(id, { config: {} });
    expect(experimentSchema.parse(back.body)).toMatchObject({
      configVersion: 3,
      config: parseExperimentConfig({}),
    });
  });

  it("refuses an invalid config with field paths and changes nothing", async () => {
    const id = await newExperiment();
    const before = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    const { response, body } = await patch(id, {
      name: "Changed",
      config: {
        model: { kind: "albert-mlm", hiddenSize: 100, numHeads: 3 },
        optimizer: { name: "adam", beta1: 1 },
      },
    });
    expect(response.status).toBe(400);
    expect(body).toMatchObject({
      error: {
        code: "INVALID_INPUT",
        issues: [
          { path: "config.model.numHeads", message: "hiddenSize must be divisible by numHeads" },
          { path: "config.optimizer.beta1", message: "Too big: expected number to be <1" },
        ],
      },
    });
    expect(await app.db.experiment.findUniqueOrThrow({ where: { id } })).toEqual(before);
  });

  it("refuses a model, strategy or shared-optimizer change once the run has trained, and nothing else", async () => {
    const id = await newExperiment();
    // Before anything is trained, the organizer may still change everything.
    const untrained = await patch(id, { config: { averaging: { strategy: "diloco" } } });
    expect(untrained.response.status).toBe(200);
    expect(experimentSchema.parse(untrained.body).configVersion).toBe(2);

    await app.db.metric.create({
      data: {
        experimentId: id,
        step: 1,
        loss: 2.3,
        samplesPerSecond: 100,
        alivePeers: 2,
        recordedAt: new Date(),
      },
    });
    const before = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    const refused = await patch(id, {
      name: "Renamed too",
      config: { model: { kind: "mnist-mlp", hiddenUnits: [32] }, averaging: { strategy: "dedloc" } },
    });
    expect(refused.response.status).toBe(409);
    expect(refused.body).toMatchObject({
      error: {
        code: "CONFLICT",
        issues: [{ path: "config.model" }, { path: "config.averaging.strategy" }],
      },
    });
    expect(JSON.stringify(refused.body)).toContain("create a new experiment");
    expect(await app.db.experiment.findUniqueOrThrow({ where: { id } })).toEqual(before);

    // Hyperparameters still change on the running run; so does the inner optimizer under diloco.
    const tuned = await patch(id, {
      config: {
        averaging: { strategy: "diloco", outerOptimizer: { learningRate: 0.5 } },
        optimizer: { name: "lamb" },
        training: { targetBatchSize: 8192 },
      },
    });
    expect(tuned.response.status).toBe(200);
    expect(experimentSchema.parse(tuned.body)).toMatchObject({
      configVersion: 3,
      config: { optimizer: { name: "lamb" }, training: { targetBatchSize: 8192 } },
    });
  });

  it("pauses and resumes the run", async () => {
    const id = await newExperiment();
    const setStatus = (status: unknown) =>
      callRoute(statusRoute.POST, `/api/v1/experiments/${id}/status`, {
        method: "POST",
        body: { status },
        params: { id },
        cookie: organizer.cookie,
      });
    const paused = await setStatus("paused");
    expect(experimentSchema.parse(await paused.json()).status).toBe("paused");
    expect((await app.db.experiment.findUniqueOrThrow({ where: { id } })).status).toBe("paused");
    expect((await setStatus("paused")).status).toBe(200);
    expect(experimentSchema.parse(await (await setStatus("running")).json()).status).toBe("running");
    const invalid = await setStatus("stopped");
    expect(invalid.status).toBe(400);
    expect(await bodyOf(invalid)).toMatchObject({ error: { issues: [{ path: "status" }] } });
  });

  it("rotates the authority key: a new public key whose sealed secret opens only at the new version", async () => {
    const id = await newExperiment();
    const before = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    const rotate = (body: unknown) =>
      callRoute(authorityKeyRoute.POST, `/api/v1/experiments/${id}/authority-key`, {
        method: "POST",
        body,
        params: { id },
        cookie: organizer.cookie,
      });
    const response = await rotate({});
    expect(response.status).toBe(200);
    const experiment = experimentSchema.parse(await response.json());
    expect(experiment.authorityKeyVersion).toBe(2);
    expect(experiment.authorityPublicKey).not.toBe(before.authorityPublicKey);

    const after = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    const pair = openAuthorityKeyPair(after, app.ctx.env.sealingSecrets);
    expect(encodePublicKey(pair.publicKey)).toBe(experiment.authorityPublicKey);
    // Sealed for version 2: the same ciphertext presented as version 1 does not open.
    expect(() =>
      openAuthorityKeyPair({ ...after, authorityKeyVersion: 1 }, app.ctx.env.sealingSecrets),
    ).toThrow(SealedKeyError);
    const third = experimentSchema.parse(await (await rotate({})).json());
    expect(third.authorityKeyVersion).toBe(3);
    expect(
      new Set([before.authorityPublicKey, experiment.authorityPublicKey, third.authorityPublicKey]).size,
    ).toBe(3);
  });

  it("requires an empty JSON object to rotate", async () => {
    const id = await newExperiment();
    const rotate = (body: unknown, headers?: Record<string, string>) =>
      callRoute(authorityKeyRoute.POST, `/api/v1/experiments/${id}/authority-key`, {
        method: "POST",
        body,
        params: { id },
        cookie: organizer.cookie,
        ...(headers ? { headers } : {}),
      });
    expect((await rotate({ force: true })).status).toBe(400);
    expect((await rotate("", { "content-type": "application/json" })).status).toBe(400);
    expect((await rotate("{}", { "content-type": "text/plain" })).status).toBe(415);
    expect((await app.db.experiment.findUniqueOrThrow({ where: { id } })).authorityKeyVersion).toBe(1);
  });
});
