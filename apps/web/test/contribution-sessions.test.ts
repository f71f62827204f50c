import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as leaderboardRoute } from "../app/api/v1/experiments/[id]/leaderboard/route.ts";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import type { Leaderboard } from "../src/api/schemas/public.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type FixtureUser,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * Credit survives restarts: a node's counters restart from zero with each process (a new session),
 * so contributions are kept per peer and session, and the leaderboard sums every session.
 */

describe.each(testDatabaseProviders())("contributions per session (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let user: FixtureUser;
  let nodes: JoinedNode[];
  let step: number;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
    user = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, user, "approved");
    const token = await createToken(app, setup.experimentId, user);
    nodes = [await joinNode(setup.experimentId, token), await joinNode(setup.experimentId, token)];
    step = 0;
  });
  afterEach(async () => {
    await app.dispose();
  });

  interface Counters {
    session?: string;
    samples: number;
    computeSeconds?: number;
    sessionSeconds?: number;
  }

  function report(node: JoinedNode, counters: Counters) {
    return {
      peerId: node.peerId,
      ...(counters.session === undefined ? {} : { session: counters.session }),
      samples: counters.samples,
      computeSeconds: counters.computeSeconds ?? 0,
      bytesAggregated: 0,
      sessionSeconds: counters.sessionSeconds ?? 0,
    };
  }

  function post(peers: unknown[]): Promise<Response> {
    step += 1;
    return postSignedJson(
      postMetrics,
      `/api/v1/experiments/${setup.experimentId}/metrics`,
      { id: setup.experimentId },
      setup.aux,
      {
        step,
        loss: 1,
        samplesPerSecond: 1,
        alivePeers: 1,
        time: Date.now(),
        peers,
      },
    );
  }

  async function postOk(peers: unknown[]): Promise<void> {
    const response = await post(peers);
    expect(response.status, JSON.stringify(await response.clone().json())).toBe(200);
  }

  async function entryOf(username: string) {
    const response = await callRoute(
      leaderboardRoute,
      `/api/v1/experiments/${setup.experimentId}/leaderboard`,
      {
        params: { id: setup.experimentId },
      },
    );
    expect(response.status).toBe(200);
    return ((await response.json()) as Leaderboard).entries.find((entry) => entry.username === username);
  }

  it("credits a restarted node for both of its sessions", async () => {
    const [node] = nodes;
    if (!node) throw new Error("a node expected");
    await postOk([
      report(node, { session: "first-run", samples: 400, computeSeconds: 40, sessionSeconds: 600 }),
    ]);
    // The process restarts: its counters begin again from zero in a new session.
    await postOk([
      report(node, { session: "second-run", samples: 30, computeSeconds: 3, sessionSeconds: 20 }),
    ]);
    // A lagging monitor still reports the first session's older counters: no step backwards.
    await postOk([
      report(node, { session: "first-run", samples: 350, computeSeconds: 35, sessionSeconds: 500 }),
    ]);
    await postOk([
      report(node, { session: "second-run", samples: 90, computeSeconds: 9, sessionSeconds: 80 }),
    ]);

    expect(await entryOf(user.username)).toEqual({
      username: user.username,
      samples: 490,
      computeSeconds: 49,
      bytesAggregated: 0,
      longestSessionSeconds: 600,
      peers: 1,
      nodeKinds: ["cli"],
    });
    expect(await app.db.contribution.count()).toBe(2);
  });

  it("sums sessions over the user's nodes, counting nodes once, and keeps reports without a session", async () => {
    const [a, b] = nodes;
    if (!a || !b) throw new Error("two nodes expected");
    await postOk([
      report(a, { session: "a1", samples: 10 }),
      report(a, { session: "a2", samples: 20 }),
      report(b, { samples: 5, sessionSeconds: 900 }),
      // The same session listed twice counts once, with the larger values.
      report(a, { session: "a2", samples: 15 }),
    ]);
    expect(await entryOf(user.username)).toMatchObject({ samples: 35, longestSessionSeconds: 900, peers: 2 });
    const rows = await app.db.contribution.findMany({ orderBy: { samples: "asc" } });
    expect(rows.map((row) => [row.session, row.samples])).toEqual([
      ["", 5n],
      ["a1", 10n],
      ["a2", 20n],
    ]);
  });

  it("refuses malformed session ids", async () => {
    const [node] = nodes;
    if (!node) throw new Error("a node expected");
    for (const session of ["x".repeat(33), "has space", "dot.ted", "ü", 7]) {
      const response = await post([{ ...report(node, { samples: 1 }), session }]);
      const body = (await response.clone().json()) as { error?: { issues?: { path: string }[] } };
      expect(await errorCode(response), String(session)).toEqual({ status: 400, code: "INVALID_INPUT" });
      expect(body.error?.issues?.map((issue) => issue.path)).toContain("peers.0.session");
    }
    expect(await app.db.contribution.count()).toBe(0);
  });
});
