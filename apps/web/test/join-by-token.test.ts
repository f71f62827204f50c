import {
  AccessPassVerifier,
  decodePublicKey,
  generateKeyPair,
  PeerRole,
  toBase64Url,
  verifyExperimentConfig,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as scopedJoinRoute } from "../app/api/v1/experiments/[id]/join/route.ts";
import { POST as joinByTokenRoute } from "../app/api/v1/join/route.ts";
import { joinResponseSchema } from "../src/api/schemas/peer.ts";
import {
  callJoin,
  createExperiment,
  createToken,
  createUser,
  errorCode,
  setAllowlistStatus,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/** POST /api/v1/join: the token alone names the experiment; refusals match the experiment-scoped route. */

const HOUR = 3600 * 1000;
let address = 0;

/** Calls POST /api/v1/join from an address of its own, so the rate limit stays out of the way. */
function callJoinByToken(body: unknown, ip?: string): Promise<Response> {
  address += 1;
  return callRoute(joinByTokenRoute, "/api/v1/join", {
    method: "POST",
    body,
    headers: { "x-forwarded-for": ip ?? `192.0.2.${address % 250}` },
  });
}

describe.each(testDatabaseProviders())("join by token (%s)", (provider) => {
  let app: TestApp;
  let clock: number;

  beforeEach(async () => {
    clock = Date.UTC(2026, 10, 21, 12, 0, 0);
    app = await createTestApp(provider, { now: () => clock });
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function approvedVolunteer() {
    const organizer = await createUser(app);
    const experiment = await createExperiment(app, organizer);
    // A second experiment, so that finding the right one by the token is not luck.
    const decoy = await createExperiment(app, organizer);
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, experiment.id, volunteer, "approved");
    await setAllowlistStatus(app, decoy.id, volunteer, "approved");
    const token = await createToken(app, experiment.id, volunteer);
    return { organizer, experiment, decoy, volunteer, token };
  }

  it("finds the experiment by the token and answers like the experiment-scoped route", async () => {
    const { experiment, decoy, volunteer, token } = await approvedVolunteer();
    const key = generateKeyPair();
    const response = await callJoinByToken({ token: token.token, publicKey: toBase64Url(key.publicKey) });
    expect(response.status).toBe(200);
    const join = joinResponseSchema.parse(await response.json());
    expect(join.experiment).toEqual({ id: experiment.id, name: experiment.name });
    expect(join.passExpiresAt).toBe(new Date(clock + 4 * HOUR).toISOString());

    const stored = await app.db.experiment.findUniqueOrThrow({ where: { id: experiment.id } });
    expect(join.authorityPublicKey).toBe(stored.authorityPublicKey);
    const authorityPublicKey = decodePublicKey(join.authorityPublicKey);
    const pass = new AccessPassVerifier({
      crypto: nodeCrypto,
      authorityPublicKey,
      experimentId: experiment.id,
    }).verify(join.pass, { now: clock });
    expect(pass).toMatchObject({ username: volunteer.username, role: PeerRole.trainer });
    expect(pass.peerPublicKey).toEqual(key.publicKey);
    const config = verifyExperimentConfig(nodeCrypto, join.signedConfig, {
      authorityPublicKey,
      experimentId: experiment.id,
    });
    expect(config.version).toBe(stored.configVersion);

    const peers = await app.db.peer.findMany({ select: { experimentId: true, tokenId: true } });
    expect(peers).toEqual([{ experimentId: experiment.id, tokenId: token.id }]);
    expect(peers.some((peer) => peer.experimentId === decoy.id)).toBe(false);

    // The same token and key through the experiment-scoped route: same shape, same experiment, one node.
    clock += HOUR;
    const scoped = await callJoin(experiment.id, {
      token: token.token,
      publicKey: toBase64Url(key.publicKey),
    });
    expect(scoped.status).toBe(200);
    const scopedJoin = joinResponseSchema.parse(await scoped.json());
    expect(Object.keys(scopedJoin).sort()).toEqual(Object.keys(join).sort());
    expect(scopedJoin.experiment).toEqual(join.experiment);
    expect(await app.db.peer.count()).toBe(1);
  });

  it("refreshes the pass when the same token and key join again", async () => {
    const { token } = await approvedVolunteer();
    const publicKey = toBase64Url(generateKeyPair().publicKey);
    const first = joinResponseSchema.parse(
      await (await callJoinByToken({ token: token.token, publicKey })).json(),
    );
    clock += 3 * HOUR;
    const second = joinResponseSchema.parse(
      await (await callJoinByToken({ token: token.token, publicKey })).json(),
    );
    expect(second.pass).not.toBe(first.pass);
    expect(second.passExpiresAt).toBe(new Date(clock + 4 * HOUR).toISOString());
    expect(await app.db.peer.count()).toBe(1);
  });

  describe("refusals", () => {
    const publicKey = () => toBase64Url(generateKeyPair().publicKey);

    it("INVALID_INPUT: a malformed body", async () => {
      const { token } = await approvedVolunteer();
      for (const body of [{}, { token: token.token }, { token: token.token, publicKey: "nope" }]) {
        expect(await errorCode(await callJoinByToken(body)), JSON.stringify(body)).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
    });

    it("TOKEN_INVALID: a malformed token or one no experiment knows", async () => {
      const { experiment, volunteer } = await approvedVolunteer();
      const deleted = await createToken(app, experiment.id, volunteer);
      await app.db.peerToken.delete({ where: { id: deleted.id } });
      for (const token of ["garbage", `brp_${"A".repeat(43)}`, deleted.token]) {
        expect(await errorCode(await callJoinByToken({ token, publicKey: publicKey() })), token).toEqual({
          status: 401,
          code: "TOKEN_INVALID",
        });
      }
      expect(await app.db.peer.count()).toBe(0);
    });

    it("TOKEN_REVOKED, checked before the owner's standing", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await app.db.peerToken.update({ where: { id: token.id }, data: { revokedAt: new Date(clock) } });
      await setAllowlistStatus(app, experiment.id, volunteer, "banned");
      expect(await errorCode(await callJoinByToken({ token: token.token, publicKey: publicKey() }))).toEqual({
        status: 401,
        code: "TOKEN_REVOKED",
      });
    });

    it("BANNED in the token's experiment, even when approved in another", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await setAllowlistStatus(app, experiment.id, volunteer, "banned");
      expect(await errorCode(await callJoinByToken({ token: token.token, publicKey: publicKey() }))).toEqual({
        status: 403,
        code: "BANNED",
      });
    });

    it("NOT_ALLOWLISTED: the owner is pending or off the token's experiment's list", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await setAllowlistStatus(app, experiment.id, volunteer, "pending");
      expect(await errorCode(await callJoinByToken({ token: token.token, publicKey: publicKey() }))).toEqual({
        status: 403,
        code: "NOT_ALLOWLISTED",
      });
      await app.db.allowlistEntry.deleteMany({
        where: { experimentId: experiment.id, userId: volunteer.id },
      });
      expect(await errorCode(await callJoinByToken({ token: token.token, publicKey: publicKey() }))).toEqual({
        status: 403,
        code: "NOT_ALLOWLISTED",
      });
      expect(await app.db.peer.count()).toBe(0);
    });

    it("EXPERIMENT_PAUSED", async () => {
      const { experiment, token } = await approvedVolunteer();
      await app.db.experiment.update({ where: { id: experiment.id }, data: { status: "paused" } });
      expect(await errorCode(await callJoinByToken({ token: token.token, publicKey: publicKey() }))).toEqual({
        status: 409,
        code: "EXPERIMENT_PAUSED",
      });
    });

    it("the experiment-scoped route still refuses another experiment's token", async () => {
      const { decoy, token } = await approvedVolunteer();
      expect(
        await errorCode(await callJoin(decoy.id, { token: token.token, publicKey: publicKey() })),
      ).toEqual({
        status: 401,
        code: "TOKEN_INVALID",
      });
    });

    it("RATE_LIMITED: shares the join bucket with the experiment-scoped route", async () => {
      const { experiment, token } = await approvedVolunteer();
      const ip = "203.0.113.9";
      const body = () => ({ token: "garbage", publicKey: publicKey() });
      for (let i = 0; i < 30; i++) {
        const scoped = await callRoute(scopedJoinRoute, `/api/v1/experiments/${experiment.id}/join`, {
          method: "POST",
          params: { id: experiment.id },
          body: body(),
          headers: { "x-forwarded-for": ip },
        });
        expect(scoped.status).toBe(401);
        expect((await callJoinByToken(body(), ip)).status).toBe(401);
      }
      const limited = await callJoinByToken({ token: token.token, publicKey: publicKey() }, ip);
      expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
      expect(await errorCode(limited)).toEqual({ status: 429, code: "RATE_LIMITED" });
      expect((await callJoinByToken({ token: token.token, publicKey: publicKey() })).status).toBe(200);
    });
  });
});
