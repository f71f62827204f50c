import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, test, type TestInfo } from "@playwright/test";
import {
  attachDir,
  isShared,
  keepLogs,
  killDemo,
  leftovers,
  peerSteps,
  peerTroubles,
  pollUntil,
  recordedSteps,
  startDemo,
} from "../support/demo.ts";
import { ProcessSet, type RunningProcess } from "../support/processes.ts";
import { e2eRun } from "../support/run-env.ts";
import type { MetricPoint } from "../support/runs.ts";

// `npm run demo` started twice on the same data, exactly as a user runs it: the first start trains
// until the platform has recorded a few steps, and ends by Ctrl-C (SIGINT to its process group) or by
// SIGKILL to every one of its processes at once. Within 60 s of the second start both peers average
// together again (a step in each peer's log with more samples than its own, in a group of two or
// more), and the platform records a step past the last one the first start recorded. The times from
// the second start to both are annotated on the report. Each test has a data directory and a port
// of its own; nothing of either start is left running.

const PEERS = 2;
/** Steps the platform records before the first start ends: enough to see the run train. */
const FIRST_START_STEPS = 3;
const FIRST_START_WITHIN_MS = 150_000;
const SECOND_START_WITHIN_MS = 60_000;
const CTRL_C_WITHIN_MS = 60_000;

let dataDir = "";
let processes = new ProcessSet();
const firstLogs = () => test.info().outputPath("first-start-logs");

test.beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "barnraise-e2e-demo-"));
  processes = new ProcessSet();
});

test.afterEach(async () => {
  const testInfo = test.info();
  // Ctrl-C first, so each start can stop what it started; then SIGKILL to whatever is left.
  await processes.stopAll(30_000);
  const killed = await killDemo(dataDir);
  if (testInfo.status !== testInfo.expectedStatus) {
    await processes.attachLogs(testInfo);
    await attachDir(testInfo, firstLogs(), "first start: ");
    const secondLogs = testInfo.outputPath("second-start-logs");
    await keepLogs(dataDir, secondLogs);
    await attachDir(testInfo, secondLogs, "second start: ");
  }
  await rm(dataDir, { recursive: true, force: true });
  expect(killed, "processes of the demo still running after it was stopped").toEqual([]);
});

test("after Ctrl-C, npm run demo starts again on the same data and trains together at once", async () => {
  test.setTimeout(4 * 60_000);
  const testInfo = test.info();
  const port = e2eRun.demoPort;
  await startedTwice(testInfo, port, async (first) => {
    await pressCtrlC(first);
  });
});

test("after SIGKILL to every process, npm run demo starts again on the same data and trains together at once", async () => {
  test.setTimeout(4 * 60_000);
  const testInfo = test.info();
  const port = e2eRun.demoPort + 1;
  await startedTwice(testInfo, port, async (first) => {
    const killed = await killDemo(dataDir);
    const commands = killed.map((info) => info.command).join("\n");
    // The script, npm, the platform, the aux and both peers: the whole demo, not a part of it.
    for (const part of [
      "scripts/demo.sh",
      "next-server",
      "apps/aux/src/cli.ts",
      "peer-1/identity.json",
      "peer-2/identity.json",
    ]) {
      expect(commands, `a SIGKILL for ${part}`).toContain(part);
    }
    await first.exited;
  });
});

/**
 * The story both tests tell: a first start that trains, `end` (Ctrl-C or SIGKILL), and a second start
 * on the same data that must train together and record past the first within 60 s.
 */
async function startedTwice(
  testInfo: TestInfo,
  port: number,
  end: (first: RunningProcess) => Promise<void>,
): Promise<void> {
  const first = startDemo(processes, "npm-run-demo-first", dataDir, port);
  await test.step(`the first start records ${FIRST_START_STEPS} steps`, async () => {
    await pollUntil(
      `the platform recording ${FIRST_START_STEPS} steps`,
      Date.now() + FIRST_START_WITHIN_MS,
      first,
      async () => {
        const points = await recordedSteps(port);
        if (points === undefined) return { waiting: "the platform does not answer yet" };
        return points.length >= FIRST_START_STEPS
          ? { done: points.length }
          : { waiting: `${points.length} steps recorded` };
      },
    );
  });

  await test.step("the first start ends, and leaves nothing running", async () => {
    await end(first);
    expect(leftovers(dataDir, port)).toEqual([]);
    await keepLogs(dataDir, firstLogs());
  });

  const restartedAt = Date.now();
  const second = startDemo(processes, "npm-run-demo-second", dataDir, port);
  const deadline = restartedAt + SECOND_START_WITHIN_MS;
  const seconds = (at: number) => `${((at - restartedAt) / 1000).toFixed(1)} s`;

  // Both are watched to the end, so that a failure reports each condition that did not hold.
  const [shared, past] = await Promise.allSettled([
    test.step<number>("within 60 s, both peers average together", () =>
      pollUntil("a shared step in each peer's log within 60 s of the second start", deadline, second, () =>
        bothPeersShared(restartedAt),
      )),
    test.step<PastFirstStart>("within 60 s, the platform records a step past the first start's last", () =>
      pollUntil(
        "a recorded step past the first start's last within 60 s of the second start",
        deadline,
        second,
        () => stepPastFirstStart(port, restartedAt),
      )),
  ]);
  if (shared.status === "rejected" || past.status === "rejected") {
    const reasons = [shared, past].flatMap((result) =>
      result.status === "rejected"
        ? [result.reason instanceof Error ? result.reason.message : String(result.reason)]
        : [],
    );
    throw new Error(reasons.join("\n"));
  }
  const sharedAt = shared.value;
  const recorded = past.value;

  const recordedAt = Date.parse(recorded.past.recordedAt);
  testInfo.annotations.push(
    { type: "second start to the first step both peers averaged together", description: seconds(sharedAt) },
    {
      type: "second start to the first step recorded past the first start's last",
      description: `${seconds(recordedAt)} (step ${recorded.past.step} on timeline ${recorded.past.timeline}; the first start's last was ${recorded.lastBefore})`,
    },
  );
  expect(sharedAt - restartedAt).toBeLessThanOrEqual(SECOND_START_WITHIN_MS);
  expect(recordedAt - restartedAt).toBeLessThanOrEqual(SECOND_START_WITHIN_MS);

  await test.step("Ctrl-C stops the second start too", async () => {
    await pressCtrlC(second);
    expect(leftovers(dataDir, port)).toEqual([]);
  });
}

/**
 * Ctrl-C in the demo's terminal: SIGINT to its process group. It has stopped cleanly once it said
 * so and its output closed (every process holding it has exited). npm itself then exits by SIGINT,
 * as it does whenever its script's shell got one, or with the script's 0.
 */
async function pressCtrlC(demo: RunningProcess): Promise<void> {
  demo.signal("SIGINT");
  const status = await demo.waitForExit(CTRL_C_WITHIN_MS);
  expect([0, "SIGINT"], `${demo.name}'s exit after Ctrl-C`).toContain(status.code ?? status.signal);
  expect(demo.tail(3), `${demo.name}'s last lines`).toContain("[barnraise] stopped");
}

/** The latest of the peers' first shared steps since `since`, or what each peer is doing instead. */
async function bothPeersShared(since: number): Promise<{ done: number } | { waiting: string }> {
  const firstShared: number[] = [];
  const waiting: string[] = [];
  for (let peer = 1; peer <= PEERS; peer += 1) {
    const steps = (await peerSteps(dataDir, peer)).filter((step) => step.time >= since);
    const shared = steps.find(isShared);
    if (shared !== undefined) {
      firstShared.push(shared.time);
      continue;
    }
    const last = steps.at(-1);
    const troubles = await peerTroubles(dataDir, peer);
    waiting.push(
      `peer-${peer}: ${
        last === undefined
          ? "no step yet"
          : `no shared step; its last: step ${last.step}, groupSize ${last.groupSize}, samples ${last.samples}, localSamples ${last.localSamples}`
      }${troubles.length > 0 ? `; its last warnings: ${troubles.join(" | ")}` : ""}`,
    );
  }
  return waiting.length === 0 ? { done: Math.max(...firstShared) } : { waiting: waiting.join("; ") };
}

interface PastFirstStart {
  /** The last step the platform recorded before the second start. */
  readonly lastBefore: number;
  /** The first step recorded since, on the current timeline, past it. */
  readonly past: MetricPoint;
}

/** The first step recorded since `since` on the current timeline past every step recorded before it. */
async function stepPastFirstStart(
  port: number,
  since: number,
): Promise<{ done: PastFirstStart } | { waiting: string }> {
  const points = await recordedSteps(port);
  if (points === undefined) return { waiting: "the platform does not answer yet" };
  const recordedSince = (point: MetricPoint) => Date.parse(point.recordedAt) >= since;
  const lastBefore = Math.max(...points.filter((point) => !recordedSince(point)).map((point) => point.step));
  const timeline = Math.max(...points.map((point) => point.timeline));
  const after = points.filter(recordedSince);
  const past = after.find((point) => point.timeline === timeline && point.step > lastBefore);
  if (past !== undefined) return { done: { lastBefore, past } };
  const latest = after.at(-1);
  return {
    waiting: `the first start's last recorded step was ${lastBefore}; since the second start: ${
      latest === undefined
        ? "none recorded"
        : `${after.length} recorded, the last step ${latest.step} on timeline ${latest.timeline}`
    }`,
  };
}
