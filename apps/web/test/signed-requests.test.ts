import {
  decodePublicKey,
  generateKeyPair,
  issueAccessPass,
  PeerRole,
  signRequest,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { POST as registerAddress } from "../app/api/v1/experiments/[id]/peers/address/route.ts";
import { openAuthorityKeyPair } from "../src/server/authority-keys.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  jsonBytes,
  postSignedJson,
  rotateAuthorityKey,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, sessionCookie, type TestApp } from "./support/test-app.ts";

/**
 * The signed aux routes accept only a fresh, unreplayed request signed by a current aux pass of the
 * experiment, for exactly this method, path, query and body, from a node whose token is unrevoked
 * and whose owner still organizes the experiment.
 */

describe.each(testDatabaseProviders())("signed aux requests (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let metricsPath: string;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    metricsPath = `/api/v1/experiments/${setup.experimentId}/metrics`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  const report = (step: number) => ({
    step,
    loss: 2.5,
    samplesPerSecond: 100,
    alivePeers: 1,
    time: Date.now(),
    peers: [],
  });

  function postMetricsWith(headers: Record<string, string>, body: Uint8Array): Promise<Response> {
    return callRoute(postMetrics, metricsPath, {
      method: "POST",
      params: { id: setup.experimentId },
      body,
      headers: { "content-type": "application/json", ...headers },
    });
  }

  it("accepts a request signed by the aux peer and records it", async () => {
    const response = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      setup.aux,
      report(1),
    );
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      ok: true,
      unknownPeers: 0,
      stored: true,
      timeline: 0,
      lastStep: 1,
    });
    expect(await app.db.metric.count({ where: { experimentId: setup.experimentId } })).toBe(1);
    expect(await app.db.usedNonce.count()).toBe(1);
  });

  it("refuses the same signed request twice (REQUEST_REPLAYED)", async () => {
    const body = jsonBytes(report(1));
    const authorization = signedAuthorization({ node: setup.aux, path: metricsPath, body });
    expect((await postMetricsWith({ authorization }, body)).status).toBe(200);
    expect(await errorCode(await postMetricsWith({ authorization }, body))).toEqual({
      status: 409,
      code: "REQUEST_REPLAYED",
    });
  });

  it("refuses a body other than the one signed (BODY_MISMATCH)", async () => {
    const signed = jsonBytes(report(1));
    const authorization = signedAuthorization({ node: setup.aux, path: metricsPath, body: signed });
    const tampered = jsonBytes({ ...report(1), loss: 0.01 });
    expect(await errorCode(await postMetricsWith({ authorization }, tampered))).toEqual({
      status: 400,
      code: "BODY_MISMATCH",
    });
    expect(await app.db.metric.count()).toBe(0);
  });

  it("refuses a request signed for another path or method (REQUEST_WRONG_SCOPE)", async () => {
    const body = jsonBytes(report(1));
    const addressPath = `/api/v1/experiments/${setup.experimentId}/peers/address`;
    for (const authorization of [
      signedAuthorization({ node: setup.aux, path: addressPath, body }),
      signedAuthorization({ node: setup.aux, path: `${metricsPath}?x=1`, body }),
      signedAuthorization({ node: setup.aux, method: "PUT", path: metricsPath, body }),
    ]) {
      expect(await errorCode(await postMetricsWith({ authorization }, body))).toEqual({
        status: 401,
        code: "REQUEST_WRONG_SCOPE",
      });
    }
  });

  it("refuses a trainer's pass (PASS_WRONG_ROLE)", async () => {
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    const trainer = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    const response = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      trainer,
      report(1),
    );
    expect(await errorCode(response)).toEqual({ status: 401, code: "PASS_WRONG_ROLE" });
  });

  it("refuses an expired pass (PASS_EXPIRED)", async () => {
    const experiment = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
    const now = Date.now();
    const expired = issueAccessPass(
      nodeCrypto,
      openAuthorityKeyPair(experiment, app.ctx.env.sealingSecrets),
      {
        experimentId: setup.experimentId,
        username: setup.organizer.username,
        role: PeerRole.aux,
        peerPublicKey: setup.aux.key.publicKey,
        grant: "token-forged",
        issuedAt: now - 5 * 3600 * 1000,
        expiresAt: now - 3600 * 1000,
      },
    );
    const body = jsonBytes(report(1));
    const authorization = signedAuthorization({ node: setup.aux, path: metricsPath, body, pass: expired });
    expect(await errorCode(await postMetricsWith({ authorization }, body))).toEqual({
      status: 401,
      code: "PASS_EXPIRED",
    });
  });

  it("refuses a request whose time is too far from the platform's clock (REQUEST_CLOCK_SKEW)", async () => {
    const body = jsonBytes(report(1));
    const authorization = signedAuthorization({
      node: setup.aux,
      path: metricsPath,
      body,
      time: Date.now() - 5 * 60 * 1000,
    });
    expect(await errorCode(await postMetricsWith({ authorization }, body))).toEqual({
      status: 401,
      code: "REQUEST_CLOCK_SKEW",
    });
  });

  it("takes passes of a rotated-away authority key, and requests addressed to it, during the grace; a node that joins again gets the new key", async () => {
    // First use caches a verifier for the current key.
    expect(
      (await postSignedJson(postMetrics, metricsPath, { id: setup.experimentId }, setup.aux, report(1)))
        .status,
    ).toBe(200);
    await rotateAuthorityKey(app, setup.experimentId);
    const rotated = await app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });

    // Addressed to the old key, with the old pass: the node has not heard of the rotation yet.
    const oldAddress = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      setup.aux,
      report(2),
    );
    expect(oldAddress.status).toBe(200);

    // Addressed to the new key, still with the old pass: it followed the rotation, its pass is on its way.
    const oldPass = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      { ...setup.aux, authorityPublicKey: decodePublicKey(rotated.authorityPublicKey) },
      report(3),
    );
    expect(oldPass.status).toBe(200);

    const rejoined = await joinNode(setup.experimentId, setup.auxToken, setup.aux.key);
    expect(rejoined.join.authorityPublicKey).toBe(rotated.authorityPublicKey);
    expect(
      (await postSignedJson(postMetrics, metricsPath, { id: setup.experimentId }, rejoined, report(4)))
        .status,
    ).toBe(200);
    // Addressed to a key the experiment never had: refused.
    const stranger = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      { ...rejoined, authorityPublicKey: generateKeyPair().publicKey },
      report(5),
    );
    expect(await errorCode(stranger)).toEqual({ status: 401, code: "REQUEST_WRONG_RECIPIENT" });
  });

  it("cuts a node off as soon as its aux token is revoked, even with a valid pass (FORBIDDEN)", async () => {
    await app.db.peerToken.update({ where: { id: setup.auxToken.id }, data: { revokedAt: new Date() } });
    const response = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      setup.aux,
      report(1),
    );
    expect(await errorCode(response)).toEqual({ status: 403, code: "FORBIDDEN" });
    expect(await app.db.metric.count()).toBe(0);
  });

  it("refuses an aux peer whose owner no longer organizes the experiment (FORBIDDEN)", async () => {
    const successor = await createUser(app);
    await app.db.experiment.update({
      where: { id: setup.experimentId },
      data: { organizerId: successor.id },
    });
    const response = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      setup.aux,
      report(1),
    );
    expect(await errorCode(response)).toEqual({ status: 403, code: "FORBIDDEN" });
  });

  it("refuses a node that holds a valid pass but no Peer row (FORBIDDEN)", async () => {
    await app.db.peer.deleteMany({ where: { experimentId: setup.experimentId } });
    const response = await postSignedJson(
      postMetrics,
      metricsPath,
      { id: setup.experimentId },
      setup.aux,
      report(1),
    );
    expect(await errorCode(response)).toEqual({ status: 403, code: "FORBIDDEN" });
  });

  it("never accepts a session cookie instead of a signature (UNAUTHENTICATED)", async () => {
    const cookie = await sessionCookie(setup.organizer);
    const response = await callRoute(postMetrics, metricsPath, {
      method: "POST",
      params: { id: setup.experimentId },
      body: report(1),
      cookie,
    });
    expect(await errorCode(response)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
    const bearer = await postMetricsWith({ authorization: "Bearer abc", cookie }, jsonBytes(report(1)));
    expect(await errorCode(bearer)).toEqual({ status: 401, code: "UNAUTHENTICATED" });
    expect(await app.db.metric.count()).toBe(0);
  });

  it("refuses a malformed signed request (MALFORMED) and one for an unknown experiment (NOT_FOUND)", async () => {
    const body = jsonBytes(report(1));
    expect(await errorCode(await postMetricsWith({ authorization: "Barnraise not-a-token" }, body))).toEqual({
      status: 400,
      code: "MALFORMED",
    });
    const path = "/api/v1/experiments/nope/metrics";
    const response = await callRoute(postMetrics, path, {
      method: "POST",
      params: { id: "nope" },
      body,
      headers: {
        "content-type": "application/json",
        authorization: signedAuthorization({ node: setup.aux, path, body }),
      },
    });
    expect(await errorCode(response)).toEqual({ status: 404, code: "NOT_FOUND" });
  });

  it("signs for another experiment's authority: the wrong recipient", async () => {
    const other = await setUpAux(app);
    const body = jsonBytes(report(1));
    const token = signRequest(nodeCrypto, setup.aux.key, {
      pass: setup.aux.join.pass,
      recipientPublicKey: other.aux.authorityPublicKey,
      scope: `POST ${metricsPath}`,
      body,
      time: Date.now(),
    });
    expect(await errorCode(await postMetricsWith({ authorization: `Barnraise ${token}` }, body))).toEqual({
      status: 401,
      code: "REQUEST_WRONG_RECIPIENT",
    });
  });

  describe("register address", () => {
    it("stores the aux peer's multiaddrs and refuses addresses of another peer", async () => {
      const path = `/api/v1/experiments/${setup.experimentId}/peers/address`;
      const params = { id: setup.experimentId };
      const own = [
        `/ip4/192.0.2.1/tcp/4001/p2p/${setup.aux.peerId}`,
        `/dns4/aux.example.org/tcp/443/wss/p2p/${setup.aux.peerId}`,
      ];
      const ok = await postSignedJson(registerAddress, path, params, setup.aux, { multiaddrs: own });
      expect(await ok.json()).toEqual({ ok: true });
      const peer = await app.db.peer.findFirstOrThrow({ where: { peerId: setup.aux.peerId } });
      expect(peer.address).toBe(own.join(" "));

      const other = await joinNode(setup.experimentId, setup.auxToken);
      for (const multiaddrs of [
        [`/ip4/192.0.2.1/tcp/4001/p2p/${other.peerId}`],
        [own[0], "/ip4/192.0.2.1/tcp/4001"],
        [],
        Array.from({ length: 9 }, () => own[0]),
        [`/ip4/192.0.2.1/tcp/4001 /p2p/${setup.aux.peerId}`],
        [`ip4/192.0.2.1/tcp/4001/p2p/${setup.aux.peerId}`],
        [`/p2p/${setup.aux.peerId}`],
        [`/ip4/${"1".repeat(520)}/p2p/${setup.aux.peerId}`],
      ]) {
        const refused = await postSignedJson(registerAddress, path, params, setup.aux, { multiaddrs });
        expect(await errorCode(refused), JSON.stringify(multiaddrs)).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
      expect((await app.db.peer.findFirstOrThrow({ where: { peerId: setup.aux.peerId } })).address).toBe(
        own.join(" "),
      );
    });
  });
});
