import { randomBytes } from "node:crypto";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as downloadRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/route.ts";
import { GET as listRoute } from "../app/api/v1/experiments/[id]/checkpoints/route.ts";
import { GET as leaderboardRoute } from "../app/api/v1/experiments/[id]/leaderboard/route.ts";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { openApiDocument } from "../src/api/openapi.ts";
import type { CheckpointList, Leaderboard } from "../src/api/schemas/public.ts";
import { rateLimits } from "../src/server/http/rate-limit.ts";
import { upload } from "./support/checkpoint-upload.ts";
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
import { removeCheckpoint } from "../src/server/storage/checkpoint-store.ts";

describe.each(testDatabaseProviders())("public reads (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function volunteerNodes(count: number): Promise<{ user: FixtureUser; nodes: JoinedNode[] }> {
    const user = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, user, "approved");
    const token = await createToken(app, setup.experimentId, user);
    const nodes = [];
    for (let i = 0; i < count; i++) nodes.push(await joinNode(setup.experimentId, token));
    return { user, nodes };
  }

  function leaderboard(id = setup.experimentId): Promise<Response> {
    return callRoute(leaderboardRoute, `/api/v1/experiments/${id}/leaderboard`, { params: { id } });
  }

  it("ranks users by samples summed over their nodes, with compute, bytes and longest session", async () => {
    const alice = await volunteerNodes(2);
    const bob = await volunteerNodes(1);
    const [a1, a2] = alice.nodes;
    const [b1] = bob.nodes;
    if (!a1 || !a2 || !b1) throw new Error("nodes expected");
    const peer = (node: JoinedNode, samples: number, computeSeconds: number, sessionSeconds: number) => ({
      peerId: node.peerId,
      samples,
      computeSeconds,
      bytesAggregated: 0,
      sessionSeconds,
    });
    const path = `/api/v1/experiments/${setup.experimentId}/metrics`;
    // A swarm this fast can have trained billions of samples in these sessions (credit is bounded by it).
    await app.db.experiment.update({
      where: { id: setup.experimentId },
      data: { swarmSamplesPerSecond: 100_000_000 },
    });
    const response = await postSignedJson(postMetrics, path, { id: setup.experimentId }, setup.aux, {
      step: 1,
      loss: 2,
      samplesPerSecond: 10,
      alivePeers: 4,
      time: Date.now(),
      peers: [
        peer(a1, 3_000_000_000, 100, 50),
        peer(a2, 1_000, 20.5, 400),
        peer(b1, 5_000_000_000, 10, 60),
        { ...peer(setup.aux, 0, 0, 3600), bytesAggregated: 7_000_000_000 },
      ],
    });
    expect(response.status).toBe(200);

    const board = (await (await leaderboard()).json()) as Leaderboard;
    expect(board.entries).toEqual([
      {
        username: bob.user.username,
        samples: 5_000_000_000,
        computeSeconds: 10,
        bytesAggregated: 0,
        longestSessionSeconds: 60,
        peers: 1,
        nodeKinds: ["cli"],
      },
      {
        username: alice.user.username,
        samples: 3_000_001_000,
        computeSeconds: 120.5,
        bytesAggregated: 0,
        longestSessionSeconds: 400,
        peers: 2,
        nodeKinds: ["cli"],
      },
      {
        username: setup.organizer.username,
        samples: 0,
        computeSeconds: 0,
        bytesAggregated: 7_000_000_000,
        longestSessionSeconds: 3600,
        peers: 1,
        nodeKinds: ["cli"],
      },
    ]);
  });

  it("shows an empty leaderboard and checkpoint list for a new experiment", async () => {
    expect(await (await leaderboard()).json()).toEqual({ entries: [] });
    const list = await callRoute(listRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints`, {
      params: { id: setup.experimentId },
    });
    expect(await list.json()).toEqual({ checkpoints: [] });
  });

  it("lists checkpoints newest step first, each with its download URL", async () => {
    for (const step of [10, 30, 20]) {
      const response = await upload({
        node: setup.aux,
        experimentId: setup.experimentId,
        step,
        loss: step / 100,
        body: new Uint8Array(randomBytes(100 + step)),
      });
      expect(response.status).toBe(201);
    }
    const list = await callRoute(listRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints`, {
      params: { id: setup.experimentId },
    });
    const { checkpoints } = (await list.json()) as CheckpointList;
    expect(checkpoints.map((checkpoint) => [checkpoint.step, checkpoint.sizeBytes, checkpoint.loss])).toEqual(
      [
        [30, 130, 0.3],
        [20, 120, 0.2],
        [10, 110, 0.1],
      ],
    );
    for (const checkpoint of checkpoints) {
      expect(checkpoint.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(checkpoint.downloadUrl).toBe(
        `/api/v1/experiments/${setup.experimentId}/checkpoints/${checkpoint.id}`,
      );
      const file = await callRoute(downloadRoute, checkpoint.downloadUrl, {
        params: { id: setup.experimentId, checkpointId: checkpoint.id },
      });
      expect((await file.arrayBuffer()).byteLength).toBe(checkpoint.sizeBytes);
    }
  });

  it("RATE_LIMITED: a flood of reads from one address, while other addresses are still served", async () => {
    const id = setup.experimentId;
    const read = (route: typeof listRoute, path: string, ip: string) =>
      callRoute(route, `/api/v1/experiments/${id}/${path}`, {
        params: { id },
        headers: { "x-forwarded-for": ip },
      });
    // The dashboard's routes share one bucket per address.
    const { points } = rateLimits.publicRead;
    for (let i = 0; i < points; i++) {
      const response = await read(
        i % 2 === 0 ? leaderboardRoute : listRoute,
        i % 2 === 0 ? "leaderboard" : "checkpoints",
        "198.51.100.9",
      );
      expect(response.status).toBe(200);
    }
    const limited = await read(leaderboardRoute, "leaderboard", "198.51.100.9");
    expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await errorCode(limited)).toEqual({ status: 429, code: "RATE_LIMITED" });
    expect((await read(listRoute, "checkpoints", "198.51.100.9")).status).toBe(429);
    expect((await read(leaderboardRoute, "leaderboard", "198.51.100.10")).status).toBe(200);
  });

  it("answers NOT_FOUND for an unknown experiment", async () => {
    expect(await errorCode(await leaderboard("nope"))).toEqual({ status: 404, code: "NOT_FOUND" });
    const list = await callRoute(listRoute, "/api/v1/experiments/nope/checkpoints", {
      params: { id: "nope" },
    });
    expect(await errorCode(list)).toEqual({ status: 404, code: "NOT_FOUND" });
  });

  it("answers NOT_FOUND when a recorded checkpoint's file is gone", async () => {
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      body: new Uint8Array(randomBytes(100)),
    });
    const { id } = (await response.json()) as { id: string };
    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id } });
    await removeCheckpoint(app.ctx.storage, row.storageKey);
    const file = await callRoute(
      downloadRoute,
      `/api/v1/experiments/${setup.experimentId}/checkpoints/${id}`,
      {
        params: { id: setup.experimentId, checkpointId: id },
      },
    );
    expect(await errorCode(file)).toEqual({ status: 404, code: "NOT_FOUND" });
  });
});

describe("the OpenAPI document", () => {
  it("describes every peer and public route, both operations where a path has two", () => {
    const paths = openApiDocument().paths ?? {};
    const methods = (path: string) =>
      Object.keys(paths[path] ?? {})
        .filter((key) => ["get", "post"].includes(key))
        .sort();
    expect(methods("/api/v1/experiments/{id}/join")).toEqual(["post"]);
    expect(methods("/api/v1/experiments/{id}/peers/address")).toEqual(["post"]);
    expect(methods("/api/v1/experiments/{id}/metrics")).toEqual(["get", "post"]);
    expect(methods("/api/v1/experiments/{id}/checkpoints")).toEqual(["get", "post"]);
    expect(methods("/api/v1/experiments/{id}/checkpoints/{checkpointId}")).toEqual(["get"]);
    expect(methods("/api/v1/experiments/{id}/leaderboard")).toEqual(["get"]);
  });
});
