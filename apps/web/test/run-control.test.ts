import { randomBytes } from "node:crypto";
import {
  AccessPassVerifier,
  DEFAULT_MAX_SKEW_MS,
  decodeAccessPassUnverified,
  generateKeyPair,
  ProtocolErrorCode,
  signRequest,
  verifyRunControl,
  type RunControl,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getControl } from "../app/api/v1/experiments/[id]/control/route.ts";
import type { RunControlResponse } from "../src/api/schemas/peer.ts";
import type { CheckpointView } from "../src/api/schemas/public.ts";
import { sha256, upload } from "./support/checkpoint-upload.ts";
import { organizerActions, type OrganizerActions } from "./support/organizer-actions.ts";
import {
  createToken,
  createUser,
  errorCode,
  getSigned,
  joinNode,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
  type FixtureToken,
  type FixtureUser,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The run control (GET /control): the organizer's standing orders, signed now by the authority key,
 * for any trainer or aux node in good standing. Its version grows with every change the swarm must
 * obey; its revocation list names everyone the swarm must refuse.
 */

interface Volunteer {
  readonly user: FixtureUser;
  readonly token: FixtureToken;
  readonly node: JoinedNode;
}

describe.each(testDatabaseProviders())("run control (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let organizer: OrganizerActions;
  let controlPath: string;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    organizer = await organizerActions(setup.organizer, setup.experimentId);
    controlPath = `/api/v1/experiments/${setup.experimentId}/control`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function volunteer(): Promise<Volunteer> {
    const user = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, user, "approved");
    const token = await createToken(app, setup.experimentId, user);
    return { user, token, node: await joinNode(setup.experimentId, token) };
  }

  function readControl(node: JoinedNode): Promise<Response> {
    return getSigned(getControl, controlPath, { id: setup.experimentId }, node);
  }

  async function controlOf(node: JoinedNode): Promise<RunControl> {
    const response = await readControl(node);
    const body = (await response.json()) as RunControlResponse;
    expect(response.status, JSON.stringify(body)).toBe(200);
    return verifyRunControl(nodeCrypto, body.control, {
      authorityPublicKey: node.authorityPublicKey,
      experimentId: setup.experimentId,
    });
  }

  async function uploadCheckpoint(step: number): Promise<{ view: CheckpointView; file: Uint8Array }> {
    const file = new Uint8Array(randomBytes(1000 + step));
    const response = await upload({ node: setup.aux, experimentId: setup.experimentId, step, body: file });
    const view = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(view)).toBe(201);
    return { view, file };
  }

  it("is signed now by the authority key, for trainers and aux peers alike", async () => {
    const { node } = await volunteer();
    const before = Date.now();
    const control = await controlOf(node);
    expect(control).toMatchObject({
      experimentId: setup.experimentId,
      version: 1,
      status: "running",
      generation: 0,
      rollback: null,
      revokedUsernames: [],
      revokedGrants: [],
    });
    expect(control.issuedAt).toBeGreaterThanOrEqual(before);
    expect((await controlOf(setup.aux)).version).toBe(1);

    // Only the experiment's authority vouches for it.
    expect(() =>
      verifyRunControl(nodeCrypto, control.token, {
        authorityPublicKey: generateKeyPair().publicKey,
        experimentId: setup.experimentId,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONTROL_BAD_SIGNATURE }));
  });

  it("lists users banned, removed or pending who have a node here, and the revoked tokens", async () => {
    const approved = await volunteer();
    const banned = await volunteer();
    const removed = await volunteer();
    const pending = await volunteer();
    const revoked = await volunteer();
    // Banned but never joined: nothing to refuse in the swarm.
    const bannedWithoutNode = await createUser(app);

    await organizer.setEntry(banned.user.username, "banned");
    await organizer.removeEntry(removed.user.username);
    await setAllowlistStatus(app, setup.experimentId, pending.user, "pending");
    await organizer.revokeToken(revoked.token.id);
    await organizer.setEntry(bannedWithoutNode.username, "banned");

    const control = await controlOf(approved.node);
    expect([...control.revokedUsernames].sort()).toEqual(
      [banned, removed, pending].map((v) => v.user.username).sort(),
    );
    expect(control.revokedUsernames).not.toContain(setup.organizer.username);
    expect(control.revokedGrants).toEqual([revoked.token.id]);
    // Ban, removal, revocation and the second ban each bumped the version.
    expect(control.version).toBe(5);
  });

  it("revokes a token's passes, never the node: the same key joining with a new token is accepted", async () => {
    const owner = await volunteer();
    const pass = decodeAccessPassUnverified(owner.node.join.pass);
    expect(pass.grant).toBe(owner.token.id);

    await organizer.revokeToken(owner.token.id);
    const afterRevoke = await controlOf(setup.aux);
    expect(afterRevoke.revokedGrants).toEqual([owner.token.id]);
    expect(await errorCode(await readControl(owner.node))).toEqual({ status: 401, code: "TOKEN_REVOKED" });

    // The volunteer makes a new token and restarts the same machine (the same identity key).
    const fresh = await createToken(app, setup.experimentId, owner.user);
    const rejoined = await joinNode(setup.experimentId, fresh, owner.node.key);
    const renewed = decodeAccessPassUnverified(rejoined.join.pass);
    expect(renewed.grant).toBe(fresh.id);
    expect(renewed.peerPublicKey).toEqual(owner.node.key.publicKey);
    const control = await controlOf(rejoined);
    expect(control.revokedGrants).toEqual([owner.token.id]);
    expect(control.revokedGrants).not.toContain(fresh.id);
    // A process still holding the old pass is refused by the platform, though the key's row now
    // names the new token.
    expect(await errorCode(await readControl(owner.node))).toEqual({ status: 401, code: "TOKEN_REVOKED" });
    // Every node verifies it that way: the old pass is refused, the new one of the same key is not.
    const passes = new AccessPassVerifier({
      crypto: nodeCrypto,
      authorityPublicKey: rejoined.authorityPublicKey,
      experimentId: setup.experimentId,
    });
    passes.setRevoked({ usernames: control.revokedUsernames, grants: control.revokedGrants });
    expect(() => passes.verify(owner.node.join.pass, { now: Date.now() })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.PASS_REVOKED }),
    );
    expect(passes.verify(rejoined.join.pass, { now: Date.now() }).grant).toBe(fresh.id);

    // Once the last pass issued on the revoked token has expired, nothing is left to refuse.
    await app.db.peerToken.update({
      where: { id: owner.token.id },
      data: { passesExpireAt: new Date(Date.now() - DEFAULT_MAX_SKEW_MS - 1000) },
    });
    expect((await controlOf(rejoined)).revokedGrants).toEqual([]);
  });

  it("lists a revoked token for a pass's lifetime at least, though it never issued one (a join racing the revocation)", async () => {
    const owner = await volunteer();
    const unused = await createToken(app, setup.experimentId, owner.user);
    const before = Date.now();
    await organizer.revokeToken(unused.id);
    expect((await controlOf(owner.node)).revokedGrants).toEqual([unused.id]);
    const row = await app.db.peerToken.findUniqueOrThrow({ where: { id: unused.id } });
    expect(row.passesExpireAt?.getTime()).toBeGreaterThanOrEqual(before + app.ctx.env.passTtlMs);
    // Still listed a clock-skew margin after the last pass expired, then not.
    await app.db.peerToken.update({
      where: { id: unused.id },
      data: { passesExpireAt: new Date(Date.now() - DEFAULT_MAX_SKEW_MS + 5_000) },
    });
    expect((await controlOf(owner.node)).revokedGrants).toEqual([unused.id]);
  });

  it("keeps a revoked token listed until the latest pass issued on it expires", async () => {
    const owner = await volunteer();
    const first = await app.db.peerToken.findUniqueOrThrow({ where: { id: owner.token.id } });
    const firstExpiry = first.passesExpireAt?.getTime();
    expect(firstExpiry).toBe(Date.parse(owner.node.join.passExpiresAt));
    // A refresh (the same join again) moves the token's horizon to the newest pass's expiry.
    await new Promise((resolve) => setTimeout(resolve, 5));
    const refreshed = await joinNode(setup.experimentId, owner.token, owner.node.key);
    const second = await app.db.peerToken.findUniqueOrThrow({ where: { id: owner.token.id } });
    expect(second.passesExpireAt?.getTime()).toBe(Date.parse(refreshed.join.passExpiresAt));
    expect(second.passesExpireAt?.getTime()).toBeGreaterThan(firstExpiry ?? Infinity);
  });

  it("refuses callers whose standing changed, like a join does, but not because the run is paused", async () => {
    const approved = await volunteer();
    const banned = await volunteer();
    const removed = await volunteer();
    const revoked = await volunteer();
    await organizer.setEntry(banned.user.username, "banned");
    await organizer.removeEntry(removed.user.username);
    await organizer.revokeToken(revoked.token.id);

    expect(await errorCode(await readControl(banned.node))).toEqual({ status: 403, code: "BANNED" });
    expect(await errorCode(await readControl(removed.node))).toEqual({
      status: 403,
      code: "NOT_ALLOWLISTED",
    });
    expect(await errorCode(await readControl(revoked.node))).toEqual({
      status: 401,
      code: "TOKEN_REVOKED",
    });

    await organizer.setStatus("paused");
    expect((await controlOf(approved.node)).status).toBe("paused");
    expect((await controlOf(setup.aux)).status).toBe("paused");
  });

  it("grows its version with every change the swarm must obey, and names the rollback checkpoint", async () => {
    const { node } = await volunteer();
    const other = await volunteer();
    const version = async () => (await controlOf(node)).version;
    expect(await version()).toBe(1);

    await organizer.setStatus("paused");
    expect(await version()).toBe(2);
    await organizer.setStatus("paused"); // no change, no new version
    expect(await version()).toBe(2);
    await organizer.setStatus("running");
    expect(await version()).toBe(3);
    await organizer.setEntry(other.user.username, "banned");
    expect(await version()).toBe(4);
    await organizer.setEntry(other.user.username, "approved");
    expect(await version()).toBe(5);
    await organizer.removeEntry(other.user.username);
    expect(await version()).toBe(6);
    await organizer.revokeToken(other.token.id);
    expect(await version()).toBe(7);

    const { view, file } = await uploadCheckpoint(40);
    expect(await version()).toBe(7); // a checkpoint is no order
    await organizer.rollBack(view.id);
    const control = await controlOf(node);
    expect(control).toMatchObject({
      version: 8,
      generation: 1,
      rollback: {
        checkpointId: view.id,
        step: 40,
        sha256: Buffer.from(sha256(file)).toString("hex"),
        sizeBytes: file.length,
      },
    });
  });

  describe("attacks", () => {
    it("refuses a request whose signature was tampered with, and records nothing for it", async () => {
      const { node } = await volunteer();
      const authorization = signedAuthorization({
        node,
        method: "GET",
        path: controlPath,
        body: new Uint8Array(0),
      });
      const [payload, signature] = authorization.slice("Barnraise ".length).split(".");
      if (payload === undefined || signature === undefined) throw new Error("a compact token expected");
      const flipped = `${signature[0] === "A" ? "B" : "A"}${signature.slice(1)}`;
      const tampered = await callRoute(getControl, controlPath, {
        params: { id: setup.experimentId },
        headers: { authorization: `Barnraise ${payload}.${flipped}` },
      });
      expect(await errorCode(tampered)).toEqual({ status: 401, code: "REQUEST_BAD_SIGNATURE" });
      // The untampered request still goes through: the forgery did not burn its nonce.
      const genuine = await callRoute(getControl, controlPath, {
        params: { id: setup.experimentId },
        headers: { authorization },
      });
      expect(genuine.status).toBe(200);
    });

    it("refuses a replayed request (REQUEST_REPLAYED)", async () => {
      const { node } = await volunteer();
      const authorization = signedAuthorization({
        node,
        method: "GET",
        path: controlPath,
        body: new Uint8Array(0),
      });
      const call = () =>
        callRoute(getControl, controlPath, {
          params: { id: setup.experimentId },
          headers: { authorization },
        });
      expect((await call()).status).toBe(200);
      expect(await errorCode(await call())).toEqual({ status: 409, code: "REQUEST_REPLAYED" });
    });

    it("refuses a request addressed to another recipient, path or method", async () => {
      const { node } = await volunteer();
      const params = { id: setup.experimentId };
      expect(
        await errorCode(
          await getSigned(getControl, controlPath, params, node, { recipient: generateKeyPair().publicKey }),
        ),
      ).toEqual({ status: 401, code: "REQUEST_WRONG_RECIPIENT" });
      expect(
        await errorCode(
          await getSigned(getControl, controlPath, params, node, {
            signedPath: `/api/v1/experiments/${setup.experimentId}/metrics`,
          }),
        ),
      ).toEqual({ status: 401, code: "REQUEST_WRONG_SCOPE" });
      expect(
        await errorCode(await getSigned(getControl, controlPath, params, node, { method: "POST" })),
      ).toEqual({ status: 401, code: "REQUEST_WRONG_SCOPE" });
    });

    it("refuses a stolen pass signed by another key, another experiment's node, and no signature", async () => {
      const { node } = await volunteer();
      const thief = generateKeyPair();
      const stolen = signRequest(nodeCrypto, thief, {
        pass: node.join.pass,
        recipientPublicKey: node.authorityPublicKey,
        scope: `GET ${controlPath}`,
        body: new Uint8Array(0),
        time: Date.now(),
      });
      const params = { id: setup.experimentId };
      expect(
        await errorCode(
          await callRoute(getControl, controlPath, {
            params,
            headers: { authorization: `Barnraise ${stolen}` },
          }),
        ),
      ).toEqual({ status: 401, code: "REQUEST_BAD_SIGNATURE" });

      const elsewhere = await setUpAux(app);
      const foreign = await getSigned(getControl, controlPath, params, {
        ...elsewhere.aux,
        authorityPublicKey: node.authorityPublicKey,
      });
      expect((await errorCode(foreign)).status).toBe(401);

      expect(await errorCode(await callRoute(getControl, controlPath, { params }))).toEqual({
        status: 401,
        code: "UNAUTHENTICATED",
      });
    });
  });
});
