import { generateKeyPair, peerIdFromEd25519PublicKey, toBase64Url } from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as browserJoinRoute } from "../app/api/v1/experiments/[id]/browser-join/route.ts";
import { GET as leaderboardRoute } from "../app/api/v1/experiments/[id]/leaderboard/route.ts";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { leaderboardSchema, type LeaderboardEntry } from "../src/api/schemas/public.ts";
import { createTestUser, uniqueName, type TestUser } from "./support/actors.ts";
import {
  createToken,
  joinNode,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The leaderboard says which kinds of node each user's credit came from: a tab that joined from a
 * signed-in browser is `browser`, a machine that joined with a token is `cli`. The kind is the
 * token's (`PeerToken.browser`), of the nodes the aux credited only; nothing a node sends says it.
 */

let address = 0;

describe.each(testDatabaseProviders())("the leaderboard's node kinds (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    // Credit is bounded by the swarm's pace: a fast swarm, so the samples below all count.
    await app.db.experiment.update({
      where: { id: setup.experimentId },
      data: { swarmSamplesPerSecond: 1_000_000 },
    });
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function volunteer(): Promise<TestUser> {
    // Named apart from the fixture users of `setUpAux`, whose names come from another counter.
    const user = await createTestUser(app, uniqueName("volunteer"));
    await setAllowlistStatus(app, setup.experimentId, user, "approved");
    return user;
  }

  /** A node of `user` that joins with a token it was given, as the command-line peer does; its PeerId. */
  async function tokenNode(user: TestUser): Promise<string> {
    const token = await createToken(app, setup.experimentId, user);
    return (await joinNode(setup.experimentId, token)).peerId;
  }

  /** A tab of `user` that joins from the signed-in browser ("Contribute from this browser"); its PeerId. */
  async function browserNode(user: TestUser): Promise<string> {
    const key = generateKeyPair();
    address += 1;
    const response = await callRoute(
      browserJoinRoute,
      `/api/v1/experiments/${setup.experimentId}/browser-join`,
      {
        method: "POST",
        params: { id: setup.experimentId },
        body: { publicKey: toBase64Url(key.publicKey) },
        cookie: user.cookie,
        headers: { "x-forwarded-for": `203.0.113.${address % 250}` },
      },
    );
    expect(response.status, JSON.stringify(await response.clone().json())).toBe(200);
    return peerIdFromEd25519PublicKey(key.publicKey).toString();
  }

  /** The aux credits each of `peerIds` with `counters` in one step. */
  async function credit(peerIds: string[], counters = { samples: 100, bytesAggregated: 0 }): Promise<void> {
    const response = await postSignedJson(
      postMetrics,
      `/api/v1/experiments/${setup.experimentId}/metrics`,
      { id: setup.experimentId },
      setup.aux,
      {
        step: 1,
        loss: 1,
        samplesPerSecond: 10,
        alivePeers: peerIds.length,
        time: Date.now(),
        peers: peerIds.map((peerId) => ({
          peerId,
          ...counters,
          computeSeconds: 1,
          sessionSeconds: 1,
        })),
      },
    );
    expect(response.status, JSON.stringify(await response.clone().json())).toBe(200);
  }

  async function entries(): Promise<Map<string, LeaderboardEntry>> {
    const response = await callRoute(
      leaderboardRoute,
      `/api/v1/experiments/${setup.experimentId}/leaderboard`,
      { params: { id: setup.experimentId } },
    );
    expect(response.status).toBe(200);
    const board = leaderboardSchema.parse(await response.json());
    return new Map(board.entries.map((entry) => [entry.username, entry]));
  }

  it("labels a browser tab's credit browser and a token machine's cli, both for a user who has both", async () => {
    const tab = await volunteer();
    const machine = await volunteer();
    const both = await volunteer();
    await credit([
      await browserNode(tab),
      await tokenNode(machine),
      await tokenNode(both),
      await browserNode(both),
    ]);

    const board = await entries();
    expect(board.get(tab.username)).toMatchObject({ peers: 1, nodeKinds: ["browser"] });
    expect(board.get(machine.username)).toMatchObject({ peers: 1, nodeKinds: ["cli"] });
    expect(board.get(both.username)).toMatchObject({ peers: 2, nodeKinds: ["browser", "cli"] });
  });

  it("counts only the kinds of the nodes the aux credited, not every node the user joined", async () => {
    const tabOnly = await volunteer();
    const machineOnly = await volunteer();
    const tab = await browserNode(tabOnly);
    await tokenNode(tabOnly);
    const machine = await tokenNode(machineOnly);
    await browserNode(machineOnly);
    await credit([tab, machine]);

    const board = await entries();
    expect(board.get(tabOnly.username)).toMatchObject({ peers: 1, nodeKinds: ["browser"] });
    expect(board.get(machineOnly.username)).toMatchObject({ peers: 1, nodeKinds: ["cli"] });
  });

  it("labels the organizer's aux, a machine that joined with a token, cli", async () => {
    await credit([setup.aux.peerId], { samples: 0, bytesAggregated: 1_000 });
    expect((await entries()).get(setup.organizer.username)?.nodeKinds).toEqual(["cli"]);
  });
});
