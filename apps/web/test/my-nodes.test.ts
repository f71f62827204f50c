import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as myNodesRoute from "../app/api/v1/me/nodes/route.ts";
import { nodeListSchema } from "../src/api/schemas/nodes.ts";
import {
  peerStatus,
  peerStatusMessage,
  STALE_AFTER_MS,
  SWARM_SEEN_WITHIN_MS,
  type PeerStatusInput,
} from "../src/server/services/peer-status.ts";
import { createCast, createWorld, uniqueName, type Cast } from "./support/actors.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";
import { PeerNotCountedReason } from "../src/api/schemas/nodes.ts";

const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);

const healthy: PeerStatusInput = {
  experimentStatus: "running",
  role: "trainer",
  isOrganizer: false,
  allowlistStatus: "approved",
  tokenRevokedAt: null,
  passExpiresAt: new Date(NOW + 3_600_000),
  lastSeenAt: new Date(NOW - 5_000),
  averaging: true,
  swarmSeenAt: new Date(NOW - 3_000),
  swarmRefusal: null,
};

/** The swarm's refusal of a revoked token's pass, `ago` ms before NOW. */
function revokedRefusal(ago: number) {
  return {
    at: new Date(NOW - ago),
    code: "PASS_REVOKED",
    reason: "the token this node joined with was revoked",
  };
}

describe("peerStatus", () => {
  it("counts a running, approved, fresh node with a valid pass and token", () => {
    expect(peerStatus(healthy, NOW)).toEqual({ counted: true });
    expect(peerStatus({ ...healthy, isOrganizer: true, allowlistStatus: null }, NOW)).toEqual({
      counted: true,
    });
    expect(peerStatus({ ...healthy, role: "aux", isOrganizer: true, allowlistStatus: null }, NOW)).toEqual({
      counted: true,
    });
  });

  it.each([
    ["experiment_paused", { experimentStatus: "paused" }],
    ["banned", { allowlistStatus: "banned" }],
    ["not_allowlisted", { allowlistStatus: "pending" }],
    ["not_allowlisted", { allowlistStatus: null }],
    ["token_revoked", { tokenRevokedAt: new Date(NOW - 1) }],
    ["pass_expired", { passExpiresAt: new Date(NOW) }],
    ["stale", { lastSeenAt: new Date(NOW - STALE_AFTER_MS - 1) }],
    ["refused_by_swarm", { swarmRefusal: revokedRefusal(1_000) }],
    ["refused_by_swarm", { swarmRefusal: revokedRefusal(1_000), swarmSeenAt: null }],
    ["not_in_swarm", { swarmSeenAt: null }],
    ["not_in_swarm", { swarmSeenAt: new Date(NOW - SWARM_SEEN_WITHIN_MS - 1) }],
    ["not_in_swarm", { swarmSeenAt: null, swarmRefusal: revokedRefusal(STALE_AFTER_MS + 1) }],
    ["joining", { averaging: null }],
    ["not_averaging", { averaging: false }],
  ] as const)("%s when %o", (reason, change) => {
    expect(peerStatus({ ...healthy, ...change }, NOW)).toEqual({ counted: false, reason });
  });

  it("counts a trainer only while the swarm accepts it and it averages, and an aux node regardless", () => {
    expect(peerStatus({ ...healthy, averaging: true }, NOW)).toEqual({ counted: true });
    // Accepted again after a refusal (it joined with a new token): the refusal is history.
    expect(peerStatus({ ...healthy, swarmRefusal: revokedRefusal(10_000) }, NOW)).toEqual({ counted: true });
    const swarmless = { swarmSeenAt: null, averaging: null, swarmRefusal: revokedRefusal(1) };
    expect(peerStatus({ ...healthy, ...swarmless, role: "aux", isOrganizer: true }, NOW)).toEqual({
      counted: true,
    });
  });

  it("says what the swarm refused and what to do about it", () => {
    const revoked = peerStatusMessage("refused_by_swarm", revokedRefusal(1));
    expect(revoked).toContain("the token this node joined with was revoked");
    expect(revoked).toContain("Create a new token and restart the node with it.");
    const banned = peerStatusMessage("refused_by_swarm", {
      ...revokedRefusal(1),
      reason: "vera was banned or removed from this experiment",
    });
    expect(banned).toContain("You are banned or no longer on the allowlist");
    expect(
      peerStatusMessage("refused_by_swarm", { ...revokedRefusal(1), code: "REQUEST_CLOCK_SKEW" }),
    ).toContain("clock");
  });

  it("says which of the volunteer's rules hold a paused trainer", () => {
    const paused = peerStatus({ ...healthy, pauseReasons: ["in-use", "battery"] }, NOW);
    expect(paused).toEqual({ counted: false, reason: "paused" });
    expect(peerStatusMessage("paused", null, ["in-use", "battery"])).toMatch(
      /^Paused: machine in use, on battery\. .*keeps its credit/,
    );
    // The swarm's report comes first: a paused node the swarm no longer sees is not in the swarm.
    expect(
      peerStatus({ ...healthy, pauseReasons: ["in-use"], swarmSeenAt: new Date(NOW - 3 * 60_000) }, NOW),
    ).toEqual({ counted: false, reason: "not_in_swarm" });
  });

  it("is not stale at exactly the limit", () => {
    expect(peerStatus({ ...healthy, lastSeenAt: new Date(NOW - STALE_AFTER_MS) }, NOW)).toEqual({
      counted: true,
    });
  });

  it("reports the first reason in the documented order", () => {
    const everythingWrong: PeerStatusInput = {
      experimentStatus: "paused",
      role: "trainer",
      isOrganizer: false,
      allowlistStatus: "banned",
      tokenRevokedAt: new Date(NOW - 1),
      passExpiresAt: new Date(NOW - 1),
      lastSeenAt: new Date(0),
      averaging: null,
      swarmSeenAt: null,
      swarmRefusal: revokedRefusal(1),
      retiredAt: new Date(NOW - 1),
      pauseReasons: ["busy"],
    };
    const order: string[] = [];
    let input = everythingWrong;
    const fixes: Partial<PeerStatusInput>[] = [
      { retiredAt: null },
      { experimentStatus: "running" },
      { allowlistStatus: "pending" },
      { allowlistStatus: "approved" },
      { tokenRevokedAt: null },
      { passExpiresAt: new Date(NOW + 1) },
      { lastSeenAt: new Date(NOW) },
      { swarmRefusal: null },
      { swarmSeenAt: new Date(NOW) },
      { pauseReasons: [] },
      { averaging: false },
      { averaging: true },
    ];
    for (const fix of fixes) {
      const status = peerStatus(input, NOW);
      order.push(status.counted ? "counted" : status.reason);
      input = { ...input, ...fix };
    }
    order.push(peerStatus(input, NOW).counted ? "counted" : "not counted");
    expect(order).toEqual([...Object.values(PeerNotCountedReason), "counted"]);
  });

  it("does not require an allowlist entry for the organizer's aux nodes, but bans win over approval of trainers", () => {
    expect(peerStatus({ ...healthy, role: "aux", allowlistStatus: null }, NOW)).toEqual({ counted: true });
    expect(peerStatus({ ...healthy, isOrganizer: true, allowlistStatus: "banned" }, NOW)).toEqual({
      counted: true,
    });
  });

  it("has a distinct sentence for every reason", () => {
    const messages = Object.values(PeerNotCountedReason).map((reason) => peerStatusMessage(reason));
    expect(new Set(messages).size).toBe(messages.length);
    for (const message of messages) expect(message).toMatch(/^[A-Z].{20,}\.$/);
  });
});

describe.each(testDatabaseProviders())("GET /api/v1/me/nodes on %s", (provider) => {
  let app: TestApp;
  let cast: Cast;

  beforeAll(async () => {
    app = await createTestApp(provider, { now: () => NOW });
    cast = await createCast(app);
  });
  afterAll(async () => {
    await app.dispose();
  });

  const addPeer = async (
    experimentId: string,
    userId: string,
    tokenId: string,
    times: { seenAgo: number; passLeft: number },
  ) =>
    app.db.peer.create({
      data: {
        experimentId,
        userId,
        tokenId,
        publicKey: uniqueName("key"),
        peerId: uniqueName("peer"),
        role: "trainer",
        address: null,
        lastSeenAt: new Date(NOW - times.seenAgo),
        passExpiresAt: new Date(NOW + times.passLeft),
        // The aux saw the swarm accept it, averaging, as recently as the platform saw it.
        swarmSeenAt: new Date(NOW - times.seenAgo),
        averaging: true,
      },
    });

  it("lists the caller's nodes in every experiment with whether each counts and why not", async () => {
    const good = await createWorld(app, cast);
    const paused = await createWorld(app, cast);
    await app.db.experiment.update({ where: { id: paused.experimentId }, data: { status: "paused" } });
    const revoked = await createWorld(app, cast);
    await app.db.peerToken.update({
      where: { id: revoked.approvedTokenId },
      data: { revokedAt: new Date(NOW) },
    });

    const fresh = { seenAgo: 1_000, passLeft: 3_600_000 };
    const counted = await addPeer(good.experimentId, cast.approved.id, good.approvedTokenId, fresh);
    const stale = await addPeer(good.experimentId, cast.approved.id, good.approvedTokenId, {
      seenAgo: STALE_AFTER_MS + 60_000,
      passLeft: 3_600_000,
    });
    const expired = await addPeer(good.experimentId, cast.approved.id, good.approvedTokenId, {
      seenAgo: 2_000,
      passLeft: -1,
    });
    const inPaused = await addPeer(paused.experimentId, cast.approved.id, paused.approvedTokenId, fresh);
    const withRevoked = await addPeer(revoked.experimentId, cast.approved.id, revoked.approvedTokenId, fresh);
    // The platform let this one in, but the swarm refuses its pass (an aux reported it).
    const refused = await addPeer(good.experimentId, cast.approved.id, good.approvedTokenId, fresh);
    await app.db.peer.update({
      where: { id: refused.id },
      data: {
        swarmRefusedAt: new Date(NOW - 500),
        swarmRefusalCode: "PASS_REVOKED",
        swarmRefusal: "the token this node joined with was revoked",
      },
    });

    const response = await callRoute(myNodesRoute.GET, "/api/v1/me/nodes", { cookie: cast.approved.cookie });
    expect(response.status).toBe(200);
    const { nodes } = nodeListSchema.parse(await response.json());
    const byId = new Map(nodes.map((node) => [node.id, node]));
    expect(nodes).toHaveLength(6);
    expect(byId.get(counted.id)).toMatchObject({
      counted: true,
      reason: null,
      experimentId: good.experimentId,
      experimentName: "Authorization test",
      peerId: counted.peerId,
      role: "trainer",
      tokenPrefix: expect.stringMatching(/^brp_/) as unknown,
    });
    expect(byId.get(stale.id)).toMatchObject({ counted: false, reason: "stale" });
    expect(byId.get(expired.id)).toMatchObject({ counted: false, reason: "pass_expired" });
    expect(byId.get(inPaused.id)).toMatchObject({ counted: false, reason: "experiment_paused" });
    expect(byId.get(withRevoked.id)).toMatchObject({ counted: false, reason: "token_revoked" });
    expect(byId.get(refused.id)).toMatchObject({
      counted: false,
      reason: "refused_by_swarm",
      swarmRefusal: {
        at: new Date(NOW - 500).toISOString(),
        code: "PASS_REVOKED",
        reason: "the token this node joined with was revoked",
      },
    });

    // A ban shows at once, without touching the node's row.
    await app.db.allowlistEntry.update({
      where: { experimentId_userId: { experimentId: good.experimentId, userId: cast.approved.id } },
      data: { status: "banned" },
    });
    const after = nodeListSchema.parse(
      await (await callRoute(myNodesRoute.GET, "/api/v1/me/nodes", { cookie: cast.approved.cookie })).json(),
    );
    expect(after.nodes.find((node) => node.id === counted.id)).toMatchObject({
      counted: false,
      reason: "banned",
    });
  });

  it("shows nobody else's nodes", async () => {
    const response = await callRoute(myNodesRoute.GET, "/api/v1/me/nodes", { cookie: cast.volunteer.cookie });
    expect(nodeListSchema.parse(await response.json()).nodes).toEqual([]);
  });
});
