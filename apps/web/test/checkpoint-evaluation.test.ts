import { randomBytes } from "node:crypto";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as evaluationRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/evaluation/route.ts";
import { GET as listRoute } from "../app/api/v1/experiments/[id]/checkpoints/route.ts";
import type { CheckpointList, CheckpointView } from "../src/api/schemas/public.ts";
import { upload } from "./support/checkpoint-upload.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  jsonBytes,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The aux peer's held-out evaluation of a checkpoint (POST …/checkpoints/{checkpointId}/evaluation):
 * accepted from the run's aux peer once per checkpoint and shown in the checkpoint list; refused
 * unsigned, from a trainer, for another experiment's checkpoint, replayed, or with a value that is
 * not a finite number in the metric's range.
 */

describe.each(testDatabaseProviders())("checkpoint evaluation (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let checkpoint: CheckpointView;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    checkpoint = await uploadCheckpoint(setup, 20);
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function uploadCheckpoint(owner: AuxSetup, step: number): Promise<CheckpointView> {
    const response = await upload({
      node: owner.aux,
      experimentId: owner.experimentId,
      step,
      body: new Uint8Array(randomBytes(2000)),
    });
    expect(response.status).toBe(201);
    return (await response.json()) as CheckpointView;
  }

  const pathOf = (checkpointId: string, experimentId = setup.experimentId) =>
    `/api/v1/experiments/${experimentId}/checkpoints/${checkpointId}/evaluation`;

  function post(
    value: unknown,
    node: JoinedNode = setup.aux,
    checkpointId = checkpoint.id,
  ): Promise<Response> {
    return postSignedJson(
      evaluationRoute,
      pathOf(checkpointId),
      { id: setup.experimentId, checkpointId },
      node,
      value,
    );
  }

  /** Sends `body` as it is (bytes JSON cannot otherwise carry, like 1e999), signed for exactly those bytes. */
  function postRaw(body: Uint8Array): Promise<Response> {
    const path = pathOf(checkpoint.id);
    return callRoute(evaluationRoute, path, {
      method: "POST",
      params: { id: setup.experimentId, checkpointId: checkpoint.id },
      body,
      headers: {
        "content-type": "application/json",
        authorization: signedAuthorization({ node: setup.aux, path, body }),
      },
    });
  }

  async function listed(): Promise<CheckpointView[]> {
    const response = await callRoute(listRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints`, {
      params: { id: setup.experimentId },
    });
    expect(response.status).toBe(200);
    return ((await response.json()) as CheckpointList).checkpoints;
  }

  async function expectNotEvaluated(): Promise<void> {
    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id: checkpoint.id } });
    expect(row.evaluatedAt).toBeNull();
    expect(row.evalValue).toBeNull();
  }

  const evaluation = { metric: "accuracy", value: 0.8125, loss: 0.61, samples: 500 };

  it("records the aux peer's evaluation once and lists it with the checkpoint", async () => {
    expect(checkpoint.evaluation).toBeNull();
    const response = await post(evaluation);
    const body = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({ id: checkpoint.id, step: 20, evaluation: { ...evaluation } });
    expect(Number.isNaN(Date.parse(body.evaluation?.evaluatedAt ?? ""))).toBe(false);
    expect(await listed()).toEqual([body]);

    const again = await post({ ...evaluation, value: 0.9 });
    expect(await errorCode(again)).toEqual({ status: 409, code: "CONFLICT" });
    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id: checkpoint.id } });
    expect(row.evalValue).toBe(0.8125);
  });

  it("refuses a request without a signature (UNAUTHENTICATED)", async () => {
    const response = await callRoute(evaluationRoute, pathOf(checkpoint.id), {
      method: "POST",
      params: { id: setup.experimentId, checkpointId: checkpoint.id },
      body: jsonBytes(evaluation),
      headers: { "content-type": "application/json" },
    });
    expect(await errorCode(response)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
    await expectNotEvaluated();
  });

  it("refuses a trainer's signed request (PASS_WRONG_ROLE)", async () => {
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    const trainer = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    expect(await errorCode(await post(evaluation, trainer))).toEqual({
      status: 401,
      code: "PASS_WRONG_ROLE",
    });
    await expectNotEvaluated();
  });

  it("refuses the checkpoint of another experiment, and an unknown one (NOT_FOUND)", async () => {
    const other = await setUpAux(app);
    const theirs = await uploadCheckpoint(other, 20);
    expect(await errorCode(await post(evaluation, setup.aux, theirs.id))).toEqual({
      status: 404,
      code: "NOT_FOUND",
    });
    expect(await errorCode(await post(evaluation, setup.aux, "no-such-checkpoint"))).toEqual({
      status: 404,
      code: "NOT_FOUND",
    });
    // Nor can the other experiment's aux evaluate this one's checkpoint through its own experiment.
    const crossed = await postSignedJson(
      evaluationRoute,
      pathOf(checkpoint.id, other.experimentId),
      { id: other.experimentId, checkpointId: checkpoint.id },
      other.aux,
      evaluation,
    );
    expect(await errorCode(crossed)).toEqual({ status: 404, code: "NOT_FOUND" });
    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id: theirs.id } });
    expect(row.evaluatedAt).toBeNull();
    await expectNotEvaluated();
  });

  it("refuses a replayed request (REQUEST_REPLAYED)", async () => {
    const body = jsonBytes(evaluation);
    const path = pathOf(checkpoint.id);
    const authorization = signedAuthorization({ node: setup.aux, path, body });
    const send = () =>
      callRoute(evaluationRoute, path, {
        method: "POST",
        params: { id: setup.experimentId, checkpointId: checkpoint.id },
        body,
        headers: { "content-type": "application/json", authorization },
      });
    expect((await send()).status).toBe(200);
    expect(await errorCode(await send())).toEqual({ status: 409, code: "REQUEST_REPLAYED" });
  });

  it("refuses values that are not finite or out of the metric's range, and other metrics (INVALID_INPUT)", async () => {
    const refused: unknown[] = [
      { ...evaluation, value: 1.5 },
      { ...evaluation, value: -0.1 },
      { ...evaluation, loss: -1 },
      { ...evaluation, value: null },
      { ...evaluation, value: "0.8" },
      { ...evaluation, samples: 0 },
      { ...evaluation, samples: 2.5 },
      { ...evaluation, metric: "bleu" },
      { ...evaluation, metric: "perplexity", value: 12 },
      { ...evaluation, metric: "mae", value: 0.3 },
      { metric: "accuracy", value: 0.8, loss: 0.6 },
      { ...evaluation, extra: true },
    ];
    for (const body of refused) {
      expect(await errorCode(await post(body)), JSON.stringify(body)).toEqual({
        status: 400,
        code: "INVALID_INPUT",
      });
    }
    for (const text of [
      '{"metric":"accuracy","value":1e999,"loss":0.6,"samples":500}',
      '{"metric":"accuracy","value":0.8,"loss":-1e999,"samples":500}',
      '{"metric":"accuracy","value":0.8,"loss":0.6,"samples":1e999}',
      // Non-finite where only the sign is checked: the schema refuses Infinity itself.
      '{"metric":"accuracy","value":0.8,"loss":1e999,"samples":500}',
      // Beyond the 32-bit column: a 400, not a database error.
      '{"metric":"accuracy","value":0.8,"loss":0.6,"samples":2147483648}',
    ]) {
      const response = await postRaw(new TextEncoder().encode(text));
      expect(await errorCode(response), text).toEqual({ status: 400, code: "INVALID_INPUT" });
    }
    await expectNotEvaluated();
  });

  it("refuses a body over 4 KiB before parsing it (PAYLOAD_TOO_LARGE)", async () => {
    const padded = `{"metric":"accuracy","value":0.8,"loss":0.6,"samples":500${" ".repeat(5000)}}`;
    expect(await errorCode(await postRaw(new TextEncoder().encode(padded)))).toEqual({
      status: 413,
      code: "PAYLOAD_TOO_LARGE",
    });
    await expectNotEvaluated();
  });
});
