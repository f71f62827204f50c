import {
  AccessPassVerifier,
  decodePublicKey,
  generateKeyPair,
  MemoryNonceStore,
  PeerRole,
  ProtocolErrorCode,
  ReplayGuard,
  RequestVerifier,
  signRequest,
  toBase64Url,
  verifyExperimentConfig,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as browserJoinRoute } from "../app/api/v1/experiments/[id]/browser-join/route.ts";
import { DELETE as revokeTokenRoute } from "../app/api/v1/experiments/[id]/tokens/[tokenId]/route.ts";
import { GET as listTokensRoute } from "../app/api/v1/experiments/[id]/tokens/route.ts";
import { joinResponseSchema } from "../src/api/schemas/peer.ts";
import { peerTokenListSchema } from "../src/api/schemas/tokens.ts";
import { createTestUser, errorCodeOf, type TestUser } from "./support/actors.ts";
import { callJoin, createExperiment, createToken, setAllowlistStatus } from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * "Contribute from this browser": a signed-in volunteer's browser gets a pass for its key with the
 * session as the credential. The same rules as a token: allowlist, ban, limits, revocation.
 */

let address = 0;

describe.each(testDatabaseProviders())("joining from a signed-in browser (%s)", (provider) => {
  let app: TestApp;
  let clock: number;
  let experimentId: string;

  beforeEach(async () => {
    clock = Date.UTC(2026, 10, 28, 12, 0, 0);
    app = await createTestApp(provider, { now: () => clock });
    const organizer = await createTestUser(app);
    experimentId = (await createExperiment(app, organizer)).id;
  });
  afterEach(async () => {
    await app.dispose();
  });

  function browserJoin(user: TestUser | undefined, publicKey: Uint8Array, init: { origin?: string } = {}) {
    address += 1;
    return callRoute(browserJoinRoute, `/api/v1/experiments/${experimentId}/browser-join`, {
      method: "POST",
      params: { id: experimentId },
      body: { publicKey: toBase64Url(publicKey) },
      ...(user === undefined ? {} : { cookie: user.cookie }),
      headers: {
        "x-forwarded-for": `203.0.113.${address % 250}`,
        ...(init.origin === undefined ? {} : { origin: init.origin }),
      },
    });
  }

  async function volunteer(status?: "pending" | "approved" | "banned"): Promise<TestUser> {
    const user = await createTestUser(app);
    if (status !== undefined) await setAllowlistStatus(app, experimentId, user, status);
    return user;
  }

  const browserTokens = (userId: string) =>
    app.db.peerToken.findMany({
      where: { experimentId, userId, browser: true },
      orderBy: { createdAt: "asc" },
    });

  it("issues an approved volunteer a pass for the browser's key, on a token of its own that the volunteer sees", async () => {
    const user = await volunteer("approved");
    const key = generateKeyPair();
    const response = await browserJoin(user, key.publicKey);
    expect(response.status).toBe(200);
    const join = joinResponseSchema.parse(await response.json());
    const authorityPublicKey = decodePublicKey(join.authorityPublicKey);
    const pass = new AccessPassVerifier({ crypto: nodeCrypto, authorityPublicKey, experimentId }).verify(
      join.pass,
      { now: clock },
    );
    expect(pass).toMatchObject({ username: user.username, role: PeerRole.trainer });
    expect(pass.peerPublicKey).toEqual(key.publicKey);
    expect(
      verifyExperimentConfig(nodeCrypto, join.signedConfig, { authorityPublicKey, experimentId }).version,
    ).toBe(1);

    const [token, ...others] = await browserTokens(user.id);
    expect(others).toEqual([]);
    expect(token).toMatchObject({ label: "Browser", role: "trainer", browser: true, revokedAt: null });
    expect(pass.grant).toBe(token?.id);
    const listed = await callRoute(listTokensRoute, `/api/v1/experiments/${experimentId}/tokens`, {
      params: { id: experimentId },
      cookie: user.cookie,
    });
    expect(peerTokenListSchema.parse(await listed.json()).tokens).toEqual([
      expect.objectContaining({ id: token?.id, browser: true, label: "Browser" }),
    ]);

    // The pass refresh: the same key, the same token; another key of the same browser user, another.
    clock += 60_000;
    const again = joinResponseSchema.parse(await (await browserJoin(user, key.publicKey)).json());
    expect(
      new AccessPassVerifier({ crypto: nodeCrypto, authorityPublicKey, experimentId }).verify(again.pass, {
        now: clock,
      }).grant,
    ).toBe(token?.id);
    expect((await browserJoin(user, generateKeyPair().publicKey)).status).toBe(200);
    expect(await browserTokens(user.id)).toHaveLength(2);
  });

  it("binds the tab's pass to its key: another key that replays it is refused, as every member checks it", async () => {
    const user = await volunteer("approved");
    const tabKey = generateKeyPair();
    const join = joinResponseSchema.parse(await (await browserJoin(user, tabKey.publicKey)).json());
    const authorityPublicKey = decodePublicKey(join.authorityPublicKey);
    const member = generateKeyPair();
    const verifier = new RequestVerifier({
      crypto: nodeCrypto,
      passes: new AccessPassVerifier({ crypto: nodeCrypto, authorityPublicKey, experimentId }),
      recipientPublicKey: member.publicKey,
      replayGuard: new ReplayGuard({ maxSkewMs: 30_000, store: new MemoryNonceStore() }),
    });
    const request = (signer: typeof tabKey) =>
      signRequest(nodeCrypto, signer, {
        pass: join.pass,
        recipientPublicKey: member.publicKey,
        scope: "swarm/hello",
        body: new Uint8Array([1, 2, 3]),
        time: clock,
      });
    const check = { scope: "swarm/hello", body: new Uint8Array([1, 2, 3]), now: clock };
    // The tab itself is taken …
    expect((await verifier.verify(request(tabKey), check)).pass.username).toBe(user.username);
    // … the same pass signed by any other key is not.
    await expect(verifier.verify(request(generateKeyPair()), check)).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_BAD_SIGNATURE,
    });
  });

  it("refuses a visitor, another site, and a volunteer who may not train, and makes them no token", async () => {
    const key = generateKeyPair().publicKey;
    expect(await errorCodeOf(await browserJoin(undefined, key))).toBe("UNAUTHENTICATED");
    const approved = await volunteer("approved");
    expect(await errorCodeOf(await browserJoin(approved, key, { origin: "https://evil.example" }))).toBe(
      "CROSS_SITE_REQUEST",
    );
    for (const [status, code] of [
      [undefined, "NOT_ALLOWLISTED"],
      ["pending", "NOT_ALLOWLISTED"],
      ["banned", "BANNED"],
    ] as const) {
      const user = await volunteer(status);
      expect(await errorCodeOf(await browserJoin(user, generateKeyPair().publicKey))).toBe(code);
      expect(await browserTokens(user.id)).toEqual([]);
    }
    expect(await app.db.peerToken.count({ where: { browser: true } })).toBe(0);
    expect(await app.db.peer.count()).toBe(0);
  });

  it("stops a browser whose token the volunteer revoked: its key is refused, a new key may join", async () => {
    const user = await volunteer("approved");
    const key = generateKeyPair();
    expect((await browserJoin(user, key.publicKey)).status).toBe(200);
    const [token] = await browserTokens(user.id);
    const revoked = await callRoute(
      revokeTokenRoute,
      `/api/v1/experiments/${experimentId}/tokens/${token?.id}`,
      {
        method: "DELETE",
        params: { id: experimentId, tokenId: token?.id ?? "" },
        cookie: user.cookie,
      },
    );
    expect(revoked.status).toBeLessThan(300);

    // The tab's next refresh with its key: refused, not handed a fresh token.
    expect(await errorCodeOf(await browserJoin(user, key.publicKey))).toBe("TOKEN_REVOKED");
    expect(await browserTokens(user.id)).toHaveLength(1);
    expect((await browserJoin(user, generateKeyPair().publicKey)).status).toBe(200);
    expect(await browserTokens(user.id)).toHaveLength(2);
  });

  it("refuses a key another volunteer runs, and leaves no token behind", async () => {
    const owner = await volunteer("approved");
    const key = generateKeyPair();
    const token = await createToken(app, experimentId, owner);
    expect(
      (await callJoin(experimentId, { token: token.token, publicKey: toBase64Url(key.publicKey) })).status,
    ).toBe(200);
    const other = await volunteer("approved");
    expect(await errorCodeOf(await browserJoin(other, key.publicKey))).toBe("CONFLICT");
    expect(await browserTokens(other.id)).toEqual([]);
  });

  it("counts browsers in the volunteer's limit of machines", async () => {
    await app.db.experiment.update({ where: { id: experimentId }, data: { maxNodesPerUser: 1 } });
    const user = await volunteer("approved");
    expect((await browserJoin(user, generateKeyPair().publicKey)).status).toBe(200);
    expect(await errorCodeOf(await browserJoin(user, generateKeyPair().publicKey))).toBe("TOO_MANY_NODES");
    expect(await browserTokens(user.id)).toHaveLength(1);
  });
});
