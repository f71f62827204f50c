import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as listRoute, POST as flagRoute } from "../app/api/v1/experiments/[id]/validator-flags/route.ts";
import type { ValidatorFlagView } from "../src/api/schemas/validator-flags.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  jsonBytes,
  postSignedJson,
  validatorFlagEvidence,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
  type FixtureUser,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, sessionCookie, type TestApp } from "./support/test-app.ts";

/**
 * The validator's flags (POST …/validator-flags, signed aux; GET for the organizer): one row per
 * flagged trainer node, holding its latest evidence and the earliest epoch it hurt in the current
 * generation; refused unsigned, from a trainer, for another experiment, replayed, forged, tampered
 * with, malformed or oversized, and for a PeerId no trainer joined with.
 */

describe.each(testDatabaseProviders())("validator flags (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let volunteer: FixtureUser;
  let attacker: JoinedNode;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    attacker = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
  });
  afterEach(async () => {
    await app.dispose();
  });

  const pathOf = (experimentId = setup.experimentId) => `/api/v1/experiments/${experimentId}/validator-flags`;

  const evidence = () => validatorFlagEvidence(attacker.peerId);

  function post(value: unknown, node: JoinedNode = setup.aux): Promise<Response> {
    return postSignedJson(flagRoute, pathOf(), { id: setup.experimentId }, node, value);
  }

  function postRaw(
    body: Uint8Array,
    authorization = signedAuthorization({ node: setup.aux, path: pathOf(), body }),
  ) {
    return callRoute(flagRoute, pathOf(), {
      method: "POST",
      params: { id: setup.experimentId },
      body,
      headers: { "content-type": "application/json", authorization },
    });
  }

  async function listed(user: FixtureUser = setup.organizer): Promise<Response> {
    return callRoute(listRoute, pathOf(), {
      params: { id: setup.experimentId },
      cookie: await sessionCookie(user),
    });
  }

  async function flags(): Promise<ValidatorFlagView[]> {
    const response = await listed();
    const body = (await response.json()) as { flags: ValidatorFlagView[] };
    expect(response.status, JSON.stringify(body)).toBe(200);
    return body.flags;
  }

  async function expectNoFlags(): Promise<void> {
    expect(await app.db.validatorFlag.count()).toBe(0);
  }

  it("records the aux's flag with the owner's name and lists it for the organizer; a later report updates it", async () => {
    const response = await post(evidence());
    const body = (await response.json()) as ValidatorFlagView;
    expect(response.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({
      ...evidence(),
      username: volunteer.username,
      ownerStatus: "approved",
      tokenRevoked: false,
      reports: 1,
    });
    expect(await flags()).toEqual([body]);

    // A later sample of the same generation keeps the earliest epoch; one after a rollback restarts it.
    await post({ ...evidence(), epoch: 15, firstHurtEpoch: 14, lossAfter: null, hurtSamples: 3 });
    expect(await flags()).toMatchObject([
      { epoch: 15, firstHurtEpoch: 11, lossAfter: null, hurtSamples: 3, reports: 2 },
    ]);
    await app.db.experiment.update({ where: { id: setup.experimentId }, data: { generation: 1 } });
    await post({ ...evidence(), epoch: 4, generation: 1, firstHurtEpoch: 3 });
    expect(await flags()).toMatchObject([{ epoch: 4, generation: 1, firstHurtEpoch: 3, reports: 3 }]);
    expect(await app.db.validatorFlag.count()).toBe(1);

    // The list says where the owner stands now: banned after the organizer bans them.
    await setAllowlistStatus(app, setup.experimentId, volunteer, "banned");
    expect(await flags()).toMatchObject([{ username: volunteer.username, ownerStatus: "banned" }]);
  });

  it("shows the list to the organizer only", async () => {
    await post(evidence());
    expect(await errorCode(await listed(volunteer))).toEqual({ status: 403, code: "FORBIDDEN" });
    const anonymous = await callRoute(listRoute, pathOf(), { params: { id: setup.experimentId } });
    expect(await errorCode(anonymous)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
  });

  it("refuses a request without a signature (UNAUTHENTICATED)", async () => {
    const response = await callRoute(flagRoute, pathOf(), {
      method: "POST",
      params: { id: setup.experimentId },
      body: jsonBytes(evidence()),
      headers: { "content-type": "application/json" },
    });
    expect(await errorCode(response)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
    await expectNoFlags();
  });

  it("refuses a trainer's signed request: a volunteer cannot flag another (PASS_WRONG_ROLE)", async () => {
    const other = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, other, "approved");
    const trainer = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, other));
    expect(await errorCode(await post(evidence(), trainer))).toEqual({
      status: 401,
      code: "PASS_WRONG_ROLE",
    });
    await expectNoFlags();
  });

  it("refuses another experiment's aux, and a PeerId that is no trainer of this experiment (NOT_FOUND)", async () => {
    const other = await setUpAux(app);
    // The other experiment's aux, on this experiment's path: its request is addressed to its own
    // experiment's authority key.
    const crossed = await postSignedJson(
      flagRoute,
      pathOf(),
      { id: setup.experimentId },
      other.aux,
      evidence(),
    );
    expect(await errorCode(crossed)).toEqual({ status: 401, code: "REQUEST_WRONG_RECIPIENT" });
    // Addressed to this experiment's key, its pass is still another authority's.
    const repointed = await postSignedJson(
      flagRoute,
      pathOf(),
      { id: setup.experimentId },
      { ...other.aux, authorityPublicKey: setup.aux.authorityPublicKey },
      evidence(),
    );
    expect(await errorCode(repointed)).toEqual({ status: 401, code: "PASS_BAD_SIGNATURE" });
    // Its own experiment knows no trainer with this PeerId.
    const elsewhere = await postSignedJson(
      flagRoute,
      pathOf(other.experimentId),
      { id: other.experimentId },
      other.aux,
      evidence(),
    );
    expect(await errorCode(elsewhere)).toEqual({ status: 404, code: "NOT_FOUND" });
    // Nor is an aux a trainer to flag.
    expect(await errorCode(await post({ ...evidence(), peerId: setup.aux.peerId }))).toEqual({
      status: 404,
      code: "NOT_FOUND",
    });
    await expectNoFlags();
  });

  it("refuses a replayed request (REQUEST_REPLAYED)", async () => {
    const body = jsonBytes(evidence());
    const authorization = signedAuthorization({ node: setup.aux, path: pathOf(), body });
    expect((await postRaw(body, authorization)).status).toBe(200);
    expect(await errorCode(await postRaw(body, authorization))).toEqual({
      status: 409,
      code: "REQUEST_REPLAYED",
    });
    expect(await flags()).toMatchObject([{ reports: 1 }]);
  });

  it("refuses a forged signature and a tampered body", async () => {
    const body = jsonBytes(evidence());
    // Signed by a key that is not the pass's.
    const forger = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    const forged = signedAuthorization({ node: { ...setup.aux, key: forger.key }, path: pathOf(), body });
    expect(await errorCode(await postRaw(body, forged))).toEqual({
      status: 401,
      code: "REQUEST_BAD_SIGNATURE",
    });
    // Signed for other bytes than those sent.
    const signedFor = jsonBytes({ ...evidence(), lossAfter: 1.2 });
    const authorization = signedAuthorization({ node: setup.aux, path: pathOf(), body: signedFor });
    expect(await errorCode(await postRaw(body, authorization))).toEqual({
      status: 400,
      code: "BODY_MISMATCH",
    });
    await expectNoFlags();
  });

  it("refuses malformed evidence (INVALID_INPUT) and a body over 4 KiB (PAYLOAD_TOO_LARGE)", async () => {
    const refused: unknown[] = [
      { ...evidence(), peerId: "not a peer id" },
      { ...evidence(), peerId: "" },
      { ...evidence(), epoch: -1 },
      { ...evidence(), epoch: 1.5 },
      { ...evidence(), firstHurtEpoch: 13 },
      { ...evidence(), baselineLoss: -1 },
      { ...evidence(), lossAfter: "big" },
      { ...evidence(), normRatio: -2 },
      { ...evidence(), hurtSamples: 4 },
      { ...evidence(), hurtSamples: 0 },
      { ...evidence(), recentSamples: 65 },
      { ...evidence(), generation: 1 },
      { ...evidence(), extra: true },
    ];
    for (const body of refused) {
      expect(await errorCode(await post(body)), JSON.stringify(body)).toEqual({
        status: 400,
        code: "INVALID_INPUT",
      });
    }
    const infinite = new TextEncoder().encode(
      JSON.stringify(evidence()).replace('"lossAfter":48.5', '"lossAfter":1e999'),
    );
    expect(await errorCode(await postRaw(infinite))).toEqual({ status: 400, code: "INVALID_INPUT" });
    const notJson = new TextEncoder().encode("{not json");
    expect(await errorCode(await postRaw(notJson))).toEqual({ status: 400, code: "INVALID_INPUT" });
    const padded = new TextEncoder().encode(`${JSON.stringify(evidence()).slice(0, -1)}${" ".repeat(5000)}}`);
    expect(await errorCode(await postRaw(padded))).toEqual({ status: 413, code: "PAYLOAD_TOO_LARGE" });
    await expectNoFlags();
  });
});
