import { createHash, randomBytes } from "node:crypto";
import {
  checkAttestedBytes,
  decodePublicKey,
  ProtocolErrorCode,
  verifyCheckpointAttestation,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as downloadRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/route.ts";
import { GET as latestRoute } from "../app/api/v1/experiments/[id]/checkpoints/latest/route.ts";
import type { CheckpointView, LatestCheckpoint } from "../src/api/schemas/public.ts";
import { storeContents, upload } from "./support/checkpoint-upload.ts";
import { organizerActions, type OrganizerActions } from "./support/organizer-actions.ts";
import { errorCode, rotateAuthorityKey, setUpAux, type AuxSetup } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The checkpoint a run resumes from (GET /checkpoints/latest), with an attestation signed at read
 * time; and the upload rules that keep checkpoints in order: one per step and timeline, and none
 * from an older rollback generation.
 */

describe.each(testDatabaseProviders())("latest checkpoint (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let organizer: OrganizerActions;
  const files = new Map<string, Uint8Array>();

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    organizer = await organizerActions(setup.organizer, setup.experimentId);
    files.clear();
  });
  afterEach(async () => {
    await app.dispose();
  });

  function uploadAt(step: number, generation?: number): Promise<Response> {
    const file = new Uint8Array(randomBytes(500 + step));
    return upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step,
      ...(generation === undefined ? {} : { generation }),
      body: file,
    }).then(async (response) => {
      if (response.status === 201) {
        const view = (await response.clone().json()) as CheckpointView;
        files.set(view.id, file);
      }
      return response;
    });
  }

  async function uploadOk(step: number, generation?: number): Promise<CheckpointView> {
    const response = await uploadAt(step, generation);
    const body = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(body)).toBe(201);
    return body;
  }

  function readLatest(): Promise<Response> {
    return callRoute(latestRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints/latest`, {
      params: { id: setup.experimentId },
    });
  }

  async function latest(): Promise<LatestCheckpoint> {
    const response = await readLatest();
    const body = (await response.json()) as LatestCheckpoint;
    expect(response.status, JSON.stringify(body)).toBe(200);
    return body;
  }

  async function authorityKey(): Promise<Uint8Array> {
    const row = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    return decodePublicKey(row.authorityPublicKey);
  }

  it("is NOT_FOUND before any checkpoint, and for an unknown experiment", async () => {
    expect(await errorCode(await readLatest())).toEqual({ status: 404, code: "NOT_FOUND" });
    const unknown = await callRoute(latestRoute, "/api/v1/experiments/nope/checkpoints/latest", {
      params: { id: "nope" },
    });
    expect(await errorCode(unknown)).toEqual({ status: 404, code: "NOT_FOUND" });
  });

  it("serves the highest step with an attestation that verifies and matches the file", async () => {
    await uploadOk(10);
    const newest = await uploadOk(30);
    await uploadOk(20);
    const read = await latest();
    expect(read.checkpoint).toEqual(newest);
    expect(read.checkpoint).toMatchObject({ step: 30, generation: 0, timeline: 0 });

    const attestation = verifyCheckpointAttestation(nodeCrypto, read.attestation, {
      authorityPublicKey: await authorityKey(),
      experimentId: setup.experimentId,
    });
    expect(attestation).toMatchObject({
      experimentId: setup.experimentId,
      checkpointId: newest.id,
      step: 30,
      sha256: newest.sha256,
      sizeBytes: newest.sizeBytes,
      generation: 0,
      timeline: 0,
      configVersion: 1,
      createdAt: Date.parse(newest.createdAt),
    });

    // The file the platform serves is the attested one.
    const download = await callRoute(downloadRoute, newest.downloadUrl, {
      params: { id: setup.experimentId, checkpointId: newest.id },
    });
    const bytes = new Uint8Array(await download.arrayBuffer());
    expect(bytes).toEqual(files.get(newest.id));
    const sha256Hex = createHash("sha256").update(bytes).digest("hex");
    expect(() => {
      checkAttestedBytes(attestation, { sha256Hex, sizeBytes: bytes.length });
    }).not.toThrow();
    expect(() => {
      checkAttestedBytes(attestation, { sha256Hex: "0".repeat(64), sizeBytes: bytes.length });
    }).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_MISMATCH }));
  });

  it("signs the attestation at read time with the current authority key", async () => {
    await uploadOk(10);
    const before = (await latest()).attestation;
    await rotateAuthorityKey(app, setup.experimentId);
    const after = (await latest()).attestation;
    const expected = { authorityPublicKey: await authorityKey(), experimentId: setup.experimentId };
    expect(verifyCheckpointAttestation(nodeCrypto, after, expected).step).toBe(10);
    expect(() => verifyCheckpointAttestation(nodeCrypto, before, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE }),
    );
  });

  it("refuses a second checkpoint of a step in the same timeline (CONFLICT), storing nothing", async () => {
    await uploadOk(10);
    expect(await errorCode(await uploadAt(10))).toEqual({ status: 409, code: "CONFLICT" });
    expect(await app.db.checkpoint.count()).toBe(1);
    expect((await storeContents(app.dataDir)).visible).toHaveLength(1);
  });

  it("after a rollback, resumes from the rollback checkpoint until the new generation saves one", async () => {
    const target = await uploadOk(10);
    await uploadOk(20);
    await organizer.rollBack(target.id);

    // The generation-0 checkpoint of step 20 is no longer where the run resumes from.
    const rolledBack = await latest();
    expect(rolledBack.checkpoint).toEqual(target);
    const attestation = verifyCheckpointAttestation(nodeCrypto, rolledBack.attestation, {
      authorityPublicKey: await authorityKey(),
      experimentId: setup.experimentId,
    });
    expect(attestation).toMatchObject({ checkpointId: target.id, step: 10, generation: 0 });

    // A straggler of generation 0 is stale, whatever step it is for.
    for (const generation of [undefined, 0]) {
      expect(await errorCode(await uploadAt(30, generation))).toEqual({
        status: 409,
        code: "STALE_GENERATION",
      });
    }
    // A generation the run has not reached is refused too.
    expect(await errorCode(await uploadAt(30, 2))).toEqual({ status: 409, code: "CONFLICT" });
    expect(await app.db.checkpoint.count()).toBe(2);
    expect((await storeContents(app.dataDir)).visible).toHaveLength(2);

    // Step 20 again, in the new timeline and generation.
    const redone = await uploadOk(20, 1);
    expect(redone).toMatchObject({ step: 20, generation: 1, timeline: 1 });
    expect((await latest()).checkpoint).toEqual(redone);
    expect(await errorCode(await uploadAt(20, 1))).toEqual({ status: 409, code: "CONFLICT" });
  });

  it("records the config version the checkpoint was trained with", async () => {
    await app.db.experiment.update({ where: { id: setup.experimentId }, data: { configVersion: 3 } });
    const view = await uploadOk(5);
    expect(await app.db.checkpoint.findUniqueOrThrow({ where: { id: view.id } })).toMatchObject({
      configVersion: 3,
      generation: 0,
      timeline: 0,
    });
    const attestation = verifyCheckpointAttestation(nodeCrypto, (await latest()).attestation, {
      authorityPublicKey: await authorityKey(),
      experimentId: setup.experimentId,
    });
    expect(attestation.configVersion).toBe(3);
  });
});
