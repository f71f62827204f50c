import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { generateKeyPair, peerIdFromEd25519PublicKey, toBase64Url, type KeyPair } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getControl } from "../app/api/v1/experiments/[id]/control/route.ts";
import { PATCH as patchExperiment } from "../app/api/v1/experiments/[id]/route.ts";
import { GET as getMyNodes } from "../app/api/v1/me/nodes/route.ts";
import { POST as retireNodeRoute } from "../app/api/v1/me/nodes/[nodeId]/retire/route.ts";
import {
  callJoin,
  createExperiment,
  createToken,
  createUser,
  errorCode,
  getSigned,
  joinNode,
  setAllowlistStatus,
  type FixtureToken,
  type FixtureUser,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, sessionCookie, type TestApp } from "./support/test-app.ts";

/**
 * A token admits a bounded number of machines (node keys with a live pass), and so does a volunteer
 * across tokens: the organizer sets both on the manage page, the volunteer page shows the places in
 * use and retires a machine. Through the routes the page and the programs call.
 */
describe.each(testDatabaseProviders())("machines per token and per volunteer (%s)", (provider) => {
  let app: TestApp;
  let organizer: FixtureUser;
  let volunteer: FixtureUser;
  let experimentId: string;

  beforeEach(async () => {
    app = await createTestApp(provider);
    organizer = await createUser(app);
    volunteer = await createUser(app);
    experimentId = (await createExperiment(app, organizer)).id;
    await setAllowlistStatus(app, experimentId, volunteer, "approved");
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function setLimits(maxNodesPerToken: number, maxNodesPerUser: number, as = organizer) {
    return callRoute(patchExperiment, `/api/v1/experiments/${experimentId}`, {
      method: "PATCH",
      params: { id: experimentId },
      body: { limits: { maxNodesPerToken, maxNodesPerUser } },
      cookie: await sessionCookie(as),
    });
  }

  async function join(token: FixtureToken, key: KeyPair) {
    const response = await callJoin(experimentId, {
      token: token.token,
      publicKey: toBase64Url(key.publicKey),
    });
    const body = (await response.json()) as { error?: { code?: string; message?: string } };
    return { status: response.status, body: { code: body.error?.code, message: body.error?.message } };
  }

  async function myNodes(user = volunteer) {
    const response = await callRoute(getMyNodes, "/api/v1/me/nodes", { cookie: await sessionCookie(user) });
    return (
      (await response.json()) as {
        nodes: {
          id: string;
          peerId: string;
          holdsPlace: boolean;
          retiredAt: string | null;
          reason: string | null;
        }[];
      }
    ).nodes;
  }

  it("refuses a machine past the token's limit, keeps running ones, and frees a place on retire", async () => {
    expect((await setLimits(2, 10)).status).toBe(200);
    const token = await createToken(app, experimentId, volunteer);
    const [a, b, c] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    await joinNode(experimentId, token, a);
    await joinNode(experimentId, token, b);
    const refused = await join(token, c);
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe("TOO_MANY_NODES");
    expect(refused.body.message).toMatch(/retire one on the volunteer page/);
    // The running machines refresh their passes as before.
    expect((await join(token, a)).status).toBe(200);
    expect((await join(token, b)).status).toBe(200);

    // The volunteer retires b on the page: c takes its place, b may not come back.
    const nodes = await myNodes();
    expect(nodes.filter((node) => node.holdsPlace)).toHaveLength(2);
    const nodeB = nodes.find((node) => node.peerId === peerIdOf(b));
    if (nodeB === undefined) throw new Error("b is listed");
    const retired = await callRoute(retireNodeRoute, `/api/v1/me/nodes/${nodeB.id}/retire`, {
      method: "POST",
      params: { nodeId: nodeB.id },
      cookie: await sessionCookie(volunteer),
    });
    expect(retired.status).toBe(200);
    expect((await join(token, c)).status).toBe(200);
    const back = await join(token, b);
    expect(back.status).toBe(403);
    expect(back.body.code).toBe("NODE_RETIRED");
    const after = await myNodes();
    expect(after.find((node) => node.id === nodeB.id)).toMatchObject({
      holdsPlace: false,
      reason: "retired",
    });
    expect(after.filter((node) => node.holdsPlace)).toHaveLength(2);
  });

  it("refuses a retired machine's control poll, and keeps its place while the swarm still has it", async () => {
    expect((await setLimits(1, 10)).status).toBe(200);
    const token = await createToken(app, experimentId, volunteer);
    const running = await joinNode(experimentId, token);
    // An aux reports it among the swarm's members now.
    await app.db.peer.updateMany({ where: { peerId: running.peerId }, data: { swarmSeenAt: new Date() } });
    const node = (await myNodes()).find((entry) => entry.peerId === running.peerId);
    if (node === undefined) throw new Error("the node is listed");
    await callRoute(retireNodeRoute, `/api/v1/me/nodes/${node.id}/retire`, {
      method: "POST",
      params: { nodeId: node.id },
      cookie: await sessionCookie(volunteer),
    });
    const path = `/api/v1/experiments/${experimentId}/control`;
    expect(await errorCode(await getSigned(getControl, path, { id: experimentId }, running))).toEqual({
      status: 403,
      code: "NODE_RETIRED",
    });
    // Still in the swarm (a machine that ignores the refusal): retiring it made no room.
    expect((await join(token, generateKeyPair())).body.code).toBe("TOO_MANY_NODES");
    expect((await myNodes()).find((entry) => entry.id === node.id)?.holdsPlace).toBe(true);
    // Once the swarm has not had it for two minutes, its place is free.
    await app.db.peer.updateMany({
      where: { peerId: running.peerId },
      data: { swarmSeenAt: new Date(Date.now() - 3 * 60_000) },
    });
    expect((await join(token, generateKeyPair())).status).toBe(200);
  });

  it("bounds a volunteer across tokens, and frees the place of a machine whose pass expired", async () => {
    expect((await setLimits(5, 2)).status).toBe(200);
    const first = await createToken(app, experimentId, volunteer);
    const second = await createToken(app, experimentId, volunteer);
    const [a, b, c] = [generateKeyPair(), generateKeyPair(), generateKeyPair()];
    await joinNode(experimentId, first, a);
    await joinNode(experimentId, second, b);
    const refused = await join(second, c);
    expect(refused.body.code).toBe("TOO_MANY_NODES");
    expect(refused.body.message).toMatch(/per volunteer/);
    // Another volunteer is not bound by this one's machines.
    const other = await createUser(app);
    await setAllowlistStatus(app, experimentId, other, "approved");
    expect((await join(await createToken(app, experimentId, other), c)).status).toBe(200);
    // a stopped: once its pass has expired its place is free.
    await app.db.peer.updateMany({
      where: { experimentId, publicKey: toBase64Url(a.publicKey) },
      data: { passExpiresAt: new Date(Date.now() - 1_000) },
    });
    expect((await join(second, generateKeyPair())).status).toBe(200);
  });

  it("lets a running machine re-token within the new token's limit", async () => {
    expect((await setLimits(1, 10)).status).toBe(200);
    const old = await createToken(app, experimentId, volunteer);
    const replacement = await createToken(app, experimentId, volunteer);
    const key = generateKeyPair();
    await joinNode(experimentId, old, key);
    expect((await join(replacement, key)).status).toBe(200);
    // The new token's one place is taken by that machine now.
    expect((await join(replacement, generateKeyPair())).body.code).toBe("TOO_MANY_NODES");
  });

  it("lets only the organizer set the limits, within bounds, and only the owner retire a node", async () => {
    expect((await setLimits(3, 3, volunteer)).status).toBe(403);
    const invalid = await setLimits(0, 3);
    expect(invalid.status).toBe(400);
    const token = await createToken(app, experimentId, volunteer);
    const joined = await joinNode(experimentId, token);
    const node = (await myNodes()).find((entry) => entry.peerId === joined.peerId);
    if (node === undefined) throw new Error("the node is listed");
    const stranger = await createUser(app);
    const response = await callRoute(retireNodeRoute, `/api/v1/me/nodes/${node.id}/retire`, {
      method: "POST",
      params: { nodeId: node.id },
      cookie: await sessionCookie(stranger),
    });
    expect(response.status).toBe(404);
    expect((await myNodes()).find((entry) => entry.id === node.id)?.retiredAt).toBeNull();
    const unauthenticated = await callRoute(retireNodeRoute, `/api/v1/me/nodes/${node.id}/retire`, {
      method: "POST",
      params: { nodeId: node.id },
    });
    expect(unauthenticated.status).toBe(401);
  });
});

function peerIdOf(key: KeyPair): string {
  return peerIdFromEd25519PublicKey(key.publicKey).toString();
}
