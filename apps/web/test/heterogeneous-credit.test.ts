import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { POST as postMetrics } from "../app/api/v1/experiments/[id]/metrics/route.ts";
import { POST as postSwarmStatus } from "../app/api/v1/experiments/[id]/swarm-status/route.ts";
import {
  createToken,
  createUser,
  joinNode,
  postSignedJson,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The platform's credit bound (see `creditBound`) against an honest heterogeneous swarm: a GPU
 * volunteer ten times faster than a CPU one is credited what it computed, through the aux's real
 * routes (its heartbeat's throughput, its per-step reports), also when the platform heard nothing
 * for a minute and the next report brings the minute's samples at once.
 */

const FAST = 1_000;
const SLOW = 100;

describe.each(testDatabaseProviders())("credit of a heterogeneous swarm (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let clock: number;
  let fast: JoinedNode;
  let slow: JoinedNode;

  beforeEach(async () => {
    clock = Date.UTC(2026, 10, 27, 12);
    app = await createTestApp(provider, { now: () => clock });
    setup = await setUpAux(app);
    const nodes: JoinedNode[] = [];
    for (let i = 0; i < 2; i++) {
      const volunteer = await createUser(app);
      await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
      nodes.push(await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer)));
    }
    [fast, slow] = nodes as [JoinedNode, JoinedNode];
  });
  afterEach(async () => {
    await app.dispose();
  });

  const id = () => ({ id: setup.experimentId });

  async function heartbeat(): Promise<void> {
    const path = `/api/v1/experiments/${setup.experimentId}/swarm-status`;
    const body = { alivePeers: 2, samplesPerSecond: FAST + SLOW, step: 0, time: clock };
    const response = await postSignedJson(postSwarmStatus, path, id(), setup.aux, body, { time: clock });
    expect(response.status).toBe(200);
  }

  async function report(step: number, seconds: number): Promise<void> {
    const path = `/api/v1/experiments/${setup.experimentId}/metrics`;
    const peer = (node: JoinedNode, rate: number) => ({
      peerId: node.peerId,
      session: "s1",
      samples: rate * seconds,
      computeSeconds: seconds,
      bytesAggregated: 0,
      sessionSeconds: seconds,
    });
    const body = {
      step,
      loss: 1,
      samplesPerSecond: FAST + SLOW,
      alivePeers: 2,
      time: clock,
      peers: [peer(fast, FAST), peer(slow, SLOW)],
    };
    const response = await postSignedJson(postMetrics, path, id(), setup.aux, body, { time: clock });
    expect(response.status).toBe(200);
  }

  async function credited(node: JoinedNode): Promise<{ samples: number; computeSeconds: number }> {
    const rows = await app.db.contribution.findMany({
      where: { experimentId: setup.experimentId, peer: { peerId: node.peerId } },
    });
    return {
      samples: rows.reduce((sum, row) => sum + Number(row.samples), 0),
      computeSeconds: rows.reduce((sum, row) => sum + row.computeSeconds, 0),
    };
  }

  it("credits a volunteer ten times faster than another what each computed, a silent minute included", async () => {
    // The aux first saw both sessions 30 s ago, with 30 s of work each.
    let seconds = 30;
    await heartbeat();
    let step = 1;
    await report(step, seconds);
    // Two minutes of steps, one report a second, a heartbeat every five.
    for (let tick = 1; tick <= 120; tick++) {
      clock += 1_000;
      seconds += 1;
      if (tick % 5 === 0) await heartbeat();
      await report(++step, seconds);
    }
    // The platform hears nothing for a minute; then the minute's samples come at once.
    clock += 60_000;
    seconds += 60;
    await heartbeat();
    await report(step + 1, seconds);

    const [fastCredit, slowCredit] = [await credited(fast), await credited(slow)];
    expect(fastCredit.samples).toBeGreaterThanOrEqual(0.95 * FAST * seconds);
    expect(fastCredit.samples).toBeLessThanOrEqual(FAST * seconds);
    expect(slowCredit.samples).toBeGreaterThanOrEqual(0.95 * SLOW * seconds);
    expect(slowCredit.samples).toBeLessThanOrEqual(SLOW * seconds);
    expect(fastCredit.computeSeconds).toBe(seconds);
    // The fast volunteer's share of the credit is its share of the work.
    expect(fastCredit.samples / (fastCredit.samples + slowCredit.samples)).toBeCloseTo(
      FAST / (FAST + SLOW),
      2,
    );
  });
});
