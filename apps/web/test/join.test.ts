import {
  AccessPassVerifier,
  decodePublicKey,
  generateKeyPair,
  parseExperimentConfig,
  PeerRole,
  toBase64Url,
  verifyExperimentConfig,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as registerAddress } from "../app/api/v1/experiments/[id]/peers/address/route.ts";
import { POST as joinRoute } from "../app/api/v1/experiments/[id]/join/route.ts";
import {
  callJoin,
  createExperiment,
  createToken,
  createUser,
  errorCode,
  joinNode,
  postSignedJson,
  setAllowlistStatus,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

const HOUR = 3600 * 1000;

const SMALL_ORDER_POINTS = [
  "0100000000000000000000000000000000000000000000000000000000000000",
  "0000000000000000000000000000000000000000000000000000000000000000",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
];

describe.each(testDatabaseProviders())("join (%s)", (provider) => {
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
    const volunteer = await createUser(app);
    await setAllowlistStatus(app, experiment.id, volunteer, "approved");
    const token = await createToken(app, experiment.id, volunteer);
    return { organizer, experiment, volunteer, token };
  }

  it("returns a pass and a config that verify, and registers the node", async () => {
    const { experiment, volunteer, token } = await approvedVolunteer();
    const key = generateKeyPair();
    const node = await joinNode(experiment.id, token, key);

    const stored = await app.db.experiment.findUniqueOrThrow({ where: { id: experiment.id } });
    expect(node.join.authorityPublicKey).toBe(stored.authorityPublicKey);
    expect(node.join.experiment).toEqual({ id: experiment.id, name: experiment.name });
    expect(node.join.passExpiresAt).toBe(new Date(clock + 4 * HOUR).toISOString());
    expect(node.join.initialPeers).toEqual([]);

    const pass = new AccessPassVerifier({
      crypto: nodeCrypto,
      authorityPublicKey: decodePublicKey(node.join.authorityPublicKey),
      experimentId: experiment.id,
    }).verify(node.join.pass, { now: clock });
    expect(pass.username).toBe(volunteer.username);
    expect(pass.role).toBe(PeerRole.trainer);
    expect(pass.peerPublicKey).toEqual(key.publicKey);
    expect(pass.expiresAt).toBe(clock + 4 * HOUR);

    const config = verifyExperimentConfig(nodeCrypto, node.join.signedConfig, {
      authorityPublicKey: decodePublicKey(node.join.authorityPublicKey),
      experimentId: experiment.id,
    });
    expect(config.version).toBe(stored.configVersion);
    expect(config.config).toEqual(parseExperimentConfig({}));

    const peer = await app.db.peer.findUniqueOrThrow({
      where: {
        experimentId_publicKey: { experimentId: experiment.id, publicKey: toBase64Url(key.publicKey) },
      },
    });
    expect(peer).toMatchObject({
      userId: volunteer.id,
      tokenId: token.id,
      peerId: node.peerId,
      role: "trainer",
      address: null,
    });
    expect(peer.passExpiresAt.getTime()).toBe(clock + 4 * HOUR);
    expect(peer.lastSeenAt.getTime()).toBe(clock);
    const tokenRow = await app.db.peerToken.findUniqueOrThrow({ where: { id: token.id } });
    expect(tokenRow.lastUsedAt?.getTime()).toBe(clock);
  });

  it("lets the organizer join with a trainer token and with an aux token", async () => {
    const organizer = await createUser(app);
    const experiment = await createExperiment(app, organizer);
    const trainer = await joinNode(experiment.id, await createToken(app, experiment.id, organizer));
    const aux = await joinNode(experiment.id, await createToken(app, experiment.id, organizer, PeerRole.aux));
    const verifier = new AccessPassVerifier({
      crypto: nodeCrypto,
      authorityPublicKey: aux.authorityPublicKey,
      experimentId: experiment.id,
    });
    expect(verifier.verify(trainer.join.pass, { now: clock }).role).toBe("trainer");
    expect(verifier.verify(aux.join.pass, { now: clock }).role).toBe("aux");
  });

  it("refreshes the pass when the same token and key join again", async () => {
    const { experiment, token } = await approvedVolunteer();
    const key = generateKeyPair();
    const first = await joinNode(experiment.id, token, key);
    clock += 3 * HOUR;
    const second = await joinNode(experiment.id, token, key);

    expect(second.join.pass).not.toBe(first.join.pass);
    expect(second.join.passExpiresAt).toBe(new Date(clock + 4 * HOUR).toISOString());
    const peers = await app.db.peer.findMany({ where: { experimentId: experiment.id } });
    expect(peers).toHaveLength(1);
    expect(peers[0]?.passExpiresAt.getTime()).toBe(clock + 4 * HOUR);
    expect(peers[0]?.lastSeenAt.getTime()).toBe(clock);
  });

  it("refuses a public key that another user already registered (CONFLICT)", async () => {
    const { experiment, token } = await approvedVolunteer();
    const other = await createUser(app);
    await setAllowlistStatus(app, experiment.id, other, "approved");
    const otherToken = await createToken(app, experiment.id, other);
    const key = generateKeyPair();
    await joinNode(experiment.id, token, key);

    const response = await callJoin(experiment.id, {
      token: otherToken.token,
      publicKey: toBase64Url(key.publicKey),
    });
    expect(await errorCode(response)).toEqual({ status: 409, code: "CONFLICT" });
    const peer = await app.db.peer.findFirstOrThrow({ where: { experimentId: experiment.id } });
    expect(peer.tokenId).toBe(token.id);
  });

  it("offers the addresses of live aux peers, most recent first", async () => {
    const { organizer, experiment, token } = await approvedVolunteer();
    const auxToken = await createToken(app, experiment.id, organizer, PeerRole.aux);
    const auxes = [];
    for (let i = 0; i < 3; i++) {
      const aux = await joinNode(experiment.id, auxToken);
      clock += 1000;
      const address = `/ip4/127.0.0.${i + 1}/tcp/4001/p2p/${aux.peerId}`;
      const path = `/api/v1/experiments/${experiment.id}/peers/address`;
      const response = await postSignedJson(
        registerAddress,
        path,
        { id: experiment.id },
        aux,
        { multiaddrs: [address] },
        { time: clock },
      );
      expect(response.status).toBe(200);
      auxes.push({ aux, address });
    }
    const [stale, older, newest] = auxes;
    if (!stale || !older || !newest) throw new Error("three aux peers expected");
    // The first aux peer was last seen 11 minutes ago; a revoked token's peer is not offered either.
    await app.db.peer.updateMany({
      where: { peerId: stale.aux.peerId },
      data: { lastSeenAt: new Date(clock - 11 * 60 * 1000) },
    });

    const trainer = await joinNode(experiment.id, token);
    expect(trainer.join.initialPeers).toEqual([newest.address, older.address]);

    await app.db.peerToken.update({ where: { id: auxToken.id }, data: { revokedAt: new Date(clock) } });
    const again = await joinNode(experiment.id, token, trainer.key);
    expect(again.join.initialPeers).toEqual([]);
  });

  describe("refusals", () => {
    it("INVALID_INPUT: a malformed body or an unusable public key", async () => {
      const { experiment, token } = await approvedVolunteer();
      const goodKey = toBase64Url(generateKeyPair().publicKey);
      const bodies: unknown[] = [
        {},
        { token: token.token },
        { publicKey: goodKey },
        { token: 42, publicKey: goodKey },
        { token: token.token, publicKey: "not base64url!" },
        { token: token.token, publicKey: toBase64Url(new Uint8Array(31).fill(7)) },
        // Small-order points (orders 1, 4 and 8) admit signatures that verify for any message.
        ...SMALL_ORDER_POINTS.map((hex) => ({
          token: token.token,
          publicKey: toBase64Url(Buffer.from(hex, "hex")),
        })),
        { token: token.token, publicKey: goodKey, extra: true },
      ];
      for (const body of bodies) {
        expect(await errorCode(await callJoin(experiment.id, body)), JSON.stringify(body)).toEqual({
          status: 400,
          code: "INVALID_INPUT",
        });
      }
      const notJson = await callRoute(joinRoute, `/api/v1/experiments/${experiment.id}/join`, {
        method: "POST",
        params: { id: experiment.id },
        body: "{not json",
        headers: { "content-type": "application/json" },
      });
      expect(await errorCode(notJson)).toEqual({ status: 400, code: "INVALID_INPUT" });
      expect(await app.db.peer.count()).toBe(0);
    });

    it("NOT_FOUND: an unknown experiment", async () => {
      const { token } = await approvedVolunteer();
      const response = await callJoin("no-such-experiment", {
        token: token.token,
        publicKey: toBase64Url(generateKeyPair().publicKey),
      });
      expect(await errorCode(response)).toEqual({ status: 404, code: "NOT_FOUND" });
    });

    it("TOKEN_INVALID: a malformed token, an unknown token, another experiment's token", async () => {
      const { organizer, experiment, volunteer } = await approvedVolunteer();
      const other = await createExperiment(app, organizer);
      await setAllowlistStatus(app, other.id, volunteer, "approved");
      const otherToken = await createToken(app, other.id, volunteer);
      const unknown = await createToken(app, experiment.id, volunteer);
      await app.db.peerToken.delete({ where: { id: unknown.id } });
      for (const token of ["garbage", `brp_${"A".repeat(42)}`, unknown.token, otherToken.token]) {
        const response = await callJoin(experiment.id, {
          token,
          publicKey: toBase64Url(generateKeyPair().publicKey),
        });
        expect(await errorCode(response), token).toEqual({ status: 401, code: "TOKEN_INVALID" });
      }
    });

    it("TOKEN_REVOKED, checked before the owner's standing", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await app.db.peerToken.update({ where: { id: token.id }, data: { revokedAt: new Date(clock) } });
      await setAllowlistStatus(app, experiment.id, volunteer, "banned");
      const response = await callJoin(experiment.id, {
        token: token.token,
        publicKey: toBase64Url(generateKeyPair().publicKey),
      });
      expect(await errorCode(response)).toEqual({ status: 401, code: "TOKEN_REVOKED" });
    });

    it("BANNED: the token's owner was banned after creating it", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await setAllowlistStatus(app, experiment.id, volunteer, "banned");
      const response = await callJoin(experiment.id, {
        token: token.token,
        publicKey: toBase64Url(generateKeyPair().publicKey),
      });
      expect(await errorCode(response)).toEqual({ status: 403, code: "BANNED" });
    });

    it("NOT_ALLOWLISTED: a trainer token whose owner is pending or off the list", async () => {
      const { experiment, volunteer, token } = await approvedVolunteer();
      await setAllowlistStatus(app, experiment.id, volunteer, "pending");
      const publicKey = toBase64Url(generateKeyPair().publicKey);
      expect(await errorCode(await callJoin(experiment.id, { token: token.token, publicKey }))).toEqual({
        status: 403,
        code: "NOT_ALLOWLISTED",
      });
      await app.db.allowlistEntry.deleteMany({ where: { userId: volunteer.id } });
      expect(await errorCode(await callJoin(experiment.id, { token: token.token, publicKey }))).toEqual({
        status: 403,
        code: "NOT_ALLOWLISTED",
      });
    });

    it("FORBIDDEN: an aux token whose owner no longer organizes the experiment", async () => {
      const { organizer, experiment, volunteer } = await approvedVolunteer();
      const auxToken = await createToken(app, experiment.id, organizer, PeerRole.aux);
      await app.db.experiment.update({ where: { id: experiment.id }, data: { organizerId: volunteer.id } });
      const response = await callJoin(experiment.id, {
        token: auxToken.token,
        publicKey: toBase64Url(generateKeyPair().publicKey),
      });
      expect(await errorCode(response)).toEqual({ status: 403, code: "FORBIDDEN" });
    });

    it("EXPERIMENT_PAUSED, checked after the owner's standing", async () => {
      const { experiment, token } = await approvedVolunteer();
      await app.db.experiment.update({ where: { id: experiment.id }, data: { status: "paused" } });
      const publicKey = toBase64Url(generateKeyPair().publicKey);
      expect(await errorCode(await callJoin(experiment.id, { token: token.token, publicKey }))).toEqual({
        status: 409,
        code: "EXPERIMENT_PAUSED",
      });
      const outsider = await createUser(app);
      const outsiderToken = await createToken(app, experiment.id, outsider);
      expect(
        await errorCode(await callJoin(experiment.id, { token: outsiderToken.token, publicKey })),
      ).toEqual({ status: 403, code: "NOT_ALLOWLISTED" });
      expect(await app.db.peer.count()).toBe(0);
    });

    it("a node that joined before refreshes its pass while the run is paused; a new key waits", async () => {
      const { experiment, token } = await approvedVolunteer();
      const publicKey = toBase64Url(generateKeyPair().publicKey);
      expect((await callJoin(experiment.id, { token: token.token, publicKey })).status).toBe(200);
      await app.db.experiment.update({ where: { id: experiment.id }, data: { status: "paused" } });
      expect((await callJoin(experiment.id, { token: token.token, publicKey })).status).toBe(200);
      const otherKey = toBase64Url(generateKeyPair().publicKey);
      expect(
        await errorCode(await callJoin(experiment.id, { token: token.token, publicKey: otherKey })),
      ).toEqual({
        status: 409,
        code: "EXPERIMENT_PAUSED",
      });
      // The known key of another user is no pass for a stranger: refused before the pause matters.
      const outsider = await createUser(app);
      const outsiderToken = await createToken(app, experiment.id, outsider);
      expect(
        await errorCode(await callJoin(experiment.id, { token: outsiderToken.token, publicKey })),
      ).toEqual({ status: 403, code: "NOT_ALLOWLISTED" });
    });

    it("RATE_LIMITED: too many joins from one address", async () => {
      const { experiment, token } = await approvedVolunteer();
      // Sixty machines on one token: past the default limits of machines, which are not the point here.
      await app.db.experiment.update({
        where: { id: experiment.id },
        data: { maxNodesPerToken: 1_000, maxNodesPerUser: 1_000 },
      });
      const from = (ip: string) =>
        callRoute(joinRoute, `/api/v1/experiments/${experiment.id}/join`, {
          method: "POST",
          params: { id: experiment.id },
          body: { token: token.token, publicKey: toBase64Url(generateKeyPair().publicKey) },
          headers: { "x-forwarded-for": ip },
        });
      let last: Response | undefined;
      for (let i = 0; i <= 60; i++) last = await from("203.0.113.7");
      if (last === undefined) throw new Error("no response");
      expect(last.status).toBe(429);
      expect(last.headers.get("retry-after")).toMatch(/^\d+$/);
      expect((await errorCode(last)).code).toBe("RATE_LIMITED");
      expect((await from("203.0.113.8")).status).toBe(200);
    });
  });
});
