import { join } from "node:path";
import { expect, test } from "@playwright/test";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type LogRecord, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import {
  createAuxToken,
  createPeerToken,
  getJson,
  publishRun,
  type Checkpoint,
  type Metrics,
} from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// The organizer corrects a live run from the manage page, and the running swarm obeys within 30 s
// through the signed run control, not at pass expiry: pause stops every peer's training (and a peer
// restarted meanwhile waits too), resume lets them go on, and a rollback to an earlier checkpoint restarts the swarm from its step, which
// the public dashboard shows with the discarded steps kept in grey.

const TARGET_BATCH = 1024;
const LOCAL_BATCH = 64;
const CHECKPOINT_EVERY = 3;
/** What the issue asks of every correction: the swarm obeys within this. */
const OBEY_MS = 30_000;

const { processes, contexts, workDir } = processStory("run-control");

const isStep = (record: LogRecord) => recordMatcher(/^step \d+$/)(record);
const stepOf = (record: LogRecord | undefined) => Number(record?.step ?? 0);

test("the organizer pauses, resumes and rolls back a live run, and the swarm obeys within 30 s", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(6 * 60_000);
  const suffix = Date.now().toString(36);
  const experimentId = `control-${suffix}`;
  const organizerContext = await browser.newContext();
  const visitorContext = await browser.newContext();
  contexts.push(organizerContext, visitorContext);
  const organizer = await organizerContext.newPage();
  const visitor = await visitorContext.newPage();
  const peers: RunningProcess[] = [];
  let aux: RunningProcess | undefined;
  let peerToken = "";

  await test.step("the organizer publishes a run and trains it with an aux and two peers", async () => {
    await register(organizer, `controller-${suffix}`);
    await publishRun(organizer, {
      id: experimentId,
      name: `Corrected digits ${suffix}`,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      checkpointEvery: CHECKPOINT_EVERY,
    });
    const auxToken = await createAuxToken(organizer, "control aux");
    aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
    peerToken = await createPeerToken(organizer, experimentId, "two desktops");
    for (const name of ["desk-1", "desk-2"]) {
      peers.push(
        startPeer(processes, name, {
          server: baseURL,
          token: peerToken,
          dir: join(workDir(), name),
          batchSize: LOCAL_BATCH,
        }),
      );
    }
    // Two checkpoints, so there is an earlier one to roll back to.
    await expect
      .poll(
        async () => {
          const { checkpoints } = await getJson<{ checkpoints: Checkpoint[] }>(
            request,
            `/api/v1/experiments/${experimentId}/checkpoints`,
          );
          return checkpoints.length;
        },
        { timeout: 180_000, intervals: [2_000] },
      )
      .toBeGreaterThanOrEqual(2);
  });

  const manage = `/experiments/${experimentId}/manage`;
  await test.step("pause: every peer stops training within 30 s and steps no further", async () => {
    await organizer.goto(manage);
    const before = new Set(peers.flatMap((peer) => peer.records()));
    await organizer.getByRole("button", { name: "Pause the run" }).click();
    await expect(organizer.getByText("The run is paused.")).toBeVisible();
    const pausedAt = Date.now();
    for (const peer of peers) {
      await peer.waitForRecord(
        "paused",
        recordMatcher("the organizer paused the run; waiting", (record) => !before.has(record)),
        Math.max(1, pausedAt + OBEY_MS - Date.now()),
      );
    }
    testInfo.annotations.push({
      type: "pause to every peer waiting",
      description: `${((Date.now() - pausedAt) / 1000).toFixed(1)} s`,
    });
    // A round already in flight may finish; after that, no peer takes another step. Steps are
    // counted, not read off the step number: a peer that was behind may load the swarm's state
    // (a jump of several steps that is not training) as that round ends.
    const roundsThen = peers.map((peer) => peer.filter(isStep).length);
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    const roundsNow = peers.map((peer) => peer.filter(isStep).length);
    for (const [index, now] of roundsNow.entries())
      expect(now, `steps of ${peers[index]?.name ?? index} while paused`).toBeLessThanOrEqual(
        (roundsThen[index] ?? 0) + 1,
      );

    await visitor.goto(`/experiments/${experimentId}`);
    await expect(visitor.getByTestId("now-eta")).toContainText("Paused by the organizer");

    // A peer restarted during the pause (Ctrl-C, then the same command) is let back in, since the
    // platform knows its key, and waits from its first minibatch.
    const [first, second] = peers;
    if (first === undefined || second === undefined) throw new Error("two peers expected");
    expect((await second.stop()).code).toBe(0);
    const again = startPeer(processes, "desk-2-again", {
      server: baseURL,
      token: peerToken,
      dir: join(workDir(), "desk-2"),
      batchSize: LOCAL_BATCH,
    });
    await again.waitForRecord("paused", recordMatcher("the organizer paused the run; waiting"), OBEY_MS);
    expect(again.filter(isStep)).toHaveLength(0);
    expect(again.filter(recordMatcher("first minibatch contributed"))).toHaveLength(0);
    peers.splice(0, peers.length, first, again);
  });

  await test.step("resume: the peers train on within 30 s", async () => {
    const before = new Set(peers.flatMap((peer) => peer.records()));
    const stepBefore = Math.max(...peers.map((peer) => stepOf(peer.filter(isStep).at(-1))));
    await organizer.getByRole("button", { name: "Resume the run" }).click();
    await expect(organizer.getByText("The run is running again.")).toBeVisible();
    const resumedAt = Date.now();
    for (const peer of peers) {
      await peer.waitForRecord(
        "resumed",
        recordMatcher("the organizer resumed the run", (record) => !before.has(record)),
        Math.max(1, resumedAt + OBEY_MS - Date.now()),
      );
      await peer.waitForRecord(
        "a step after the resume",
        (record) => isStep(record) && stepOf(record) > stepBefore + 1,
        60_000,
      );
    }
  });

  await test.step("rollback: the swarm restarts from the earlier checkpoint within 30 s", async () => {
    await organizer.reload();
    const rows = organizer.getByTestId("rollback-checkpoint-row");
    // Newest first: the last row is the earliest checkpoint.
    const target = rows.last();
    const step = Number(await target.getAttribute("data-step"));
    expect(step).toBeGreaterThanOrEqual(CHECKPOINT_EVERY);
    const reachedBefore = Math.max(...peers.map((peer) => stepOf(peer.filter(isStep).at(-1))));
    expect(reachedBefore).toBeGreaterThan(step);

    const before = new Set(peers.flatMap((peer) => peer.records()));
    await target.getByRole("button", { name: `Roll back to step ${step}` }).click();
    await target.getByRole("button", { name: `Confirm roll back to step ${step}` }).click();
    await expect(organizer.getByText(`Rolled the run back to the checkpoint of step ${step}.`)).toBeVisible();
    const rolledBackAt = Date.now();
    const rolledBack: LogRecord[] = [];
    for (const peer of peers) {
      rolledBack.push(
        await peer.waitForRecord(
          "rolled back",
          recordMatcher(`the organizer rolled the run back to step ${step}`, (record) => !before.has(record)),
          Math.max(1, rolledBackAt + OBEY_MS - Date.now()),
        ),
      );
    }
    testInfo.annotations.push({
      type: "rollback to every peer loaded",
      description: `${((Date.now() - rolledBackAt) / 1000).toFixed(1)} s`,
    });
    await expect(organizer.getByTestId("rollback-generation")).toHaveText(
      "The run has been rolled back once.",
    );

    // The swarm trains on from the checkpoint's step, together: each peer's next step follows the
    // checkpoint (or state a peer of the rolled-back run handed it: a fast swarm may step on far while
    // one peer still loads), and within 30 s both step in a group of two again. Before, a peer could
    // wait out a matchmaking deadline for a group that its epoch had formed before the rollback.
    const restarted: boolean[] = [];
    for (const [index, peer] of peers.entries()) {
      const records = peer.records();
      const loadedAt = records.indexOf(rolledBack[index] ?? {});
      const sinceRollback = (record: LogRecord) => records.indexOf(record) > loadedAt;
      const next = await peer.waitForRecord(
        "a step after the rollback",
        (record) => isStep(record) && sinceRollback(record),
        60_000,
      );
      const together = await peer
        .waitForRecord(
          "a step in a group of two after the rollback",
          (record) => isStep(record) && sinceRollback(record) && Number(record.groupSize) >= 2,
          Math.max(1, rolledBackAt + OBEY_MS - Date.now()),
        )
        .catch((error: unknown) => error as Error);
      // What the peer logged after the rollback, so that a failure here explains itself.
      const trail = records
        .slice(loadedAt)
        .filter((record) => record.msg !== "status")
        .slice(0, 40)
        .map((record) => {
          const error = record.err as { message?: unknown } | undefined;
          const reason = typeof error?.message === "string" ? ` (${error.message})` : "";
          return `${JSON.stringify(record.time)} ${JSON.stringify(record.msg)}${reason}`;
        })
        .join("\n");
      const context = `${peer.name} after the rollback to step ${step} (the swarm had reached step ${reachedBefore} or more):\n${trail}`;
      const handedOn = records.some(
        (record) =>
          sinceRollback(record) &&
          records.indexOf(record) < records.indexOf(next) &&
          recordMatcher(/^loaded the swarm's state at step \d+$/)(record),
      );
      if (!handedOn) expect(stepOf(next), context).toBe(step + 1);
      expect(together instanceof Error ? together.message : "", context).toBe("");
      restarted.push(!handedOn);
    }
    // At least one of them restarted from the checkpoint itself.
    expect(restarted).toContain(true);
    testInfo.annotations.push({
      type: "rollback to both peers stepping together",
      description: `${((Date.now() - rolledBackAt) / 1000).toFixed(1)} s`,
    });

    // The public curve: the rollback is marked, and the abandoned steps stay, as discarded.
    await expect
      .poll(
        async () => {
          const { points, events } = await getJson<Metrics>(
            request,
            `/api/v1/experiments/${experimentId}/metrics?maxPoints=5000`,
          );
          const latest = points.filter((point) => !point.discarded).at(-1);
          return {
            rolledBackTo: events.filter((event) => event.kind === "rolled-back").map((event) => event.step),
            discardedAfterIt: points.some((point) => point.discarded && point.step > step),
            trainsOnAfterIt: latest !== undefined && latest.step > step,
          };
        },
        { timeout: 90_000, intervals: [2_000] },
      )
      .toEqual({ rolledBackTo: [step], discardedAfterIt: true, trainsOnAfterIt: true });
    await visitor.reload();
    const chart = visitor.getByTestId("chart-loss-step");
    await expect(chart).toHaveAttribute("data-markers", "1");
    expect(Number(await chart.getAttribute("data-discarded-points"))).toBeGreaterThan(0);
    // The loss curve marks it (the other step charts carry the same marker).
    await expect(chart.getByText(`rolled back to step ${step}`, { exact: true })).toBeVisible();
    await expect(visitor.getByTestId("run-events")).toContainText(
      `the organizer rolled the run back from step`,
    );
    await screenshots(visitor, testInfo, "dashboard-after-rollback");
  });

  // Nobody was hurt on the way: the peers never left.
  for (const peer of peers) expect(peer.status).toBeUndefined();
  expect(aux?.status).toBeUndefined();
});
