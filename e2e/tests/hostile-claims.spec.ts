import { join } from "node:path";
import { expect, test, type Page } from "@playwright/test";
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { addressesOf, runSwarmScript } from "../support/swarm-scripts.ts";
import { baseURL } from "../support/run-env.ts";
import { createAuxToken, createPeerToken, getJson, leaderboardSamples, publishRun } from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// A volunteer with a valid token is inside the swarm, not believed (issue "hostile volunteers"):
// an organizer's run trains with an aux and a volunteer's two honest peers, while a second
// volunteer's node gossips correctly signed progress records claiming 2^47 samples, a step a
// million epochs ahead and 10^9 samples/s. The dashboard's numbers stay what the honest peers did,
// the honest peers train on, and the manage page lists the liar's node with what it claimed.

const TARGET_BATCH = 512;
const LOCAL_BATCH = 64;
/** How long the liar keeps claiming. */
const CLAIM_SECONDS = 20;

const { processes, contexts, workDir } = processStory("hostile-claims");

interface MetricPoint {
  readonly step: number;
  readonly loss: number;
}

test("records that claim what no trainer could leave the dashboard as the honest peers made it", async ({
  browser,
}, testInfo) => {
  test.setTimeout(6 * 60_000);
  const suffix = Date.now().toString(36);
  const organizerName = `keeper-${suffix}`;
  const veraName = `vera-${suffix}`;
  const malloryName = `mallory-${suffix}`;
  const experimentId = `claims-${suffix}`;
  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const organizer = await newPage();
  const vera = await newPage();
  const mallory = await newPage();
  let aux: RunningProcess | undefined;

  await test.step("an organizer's run trains with an aux and two honest peers", async () => {
    await register(organizer, organizerName);
    await register(vera, veraName);
    await register(mallory, malloryName);
    // The form's defaults otherwise: CenteredClip aggregation.
    await publishRun(organizer, {
      id: experimentId,
      name: `Claimed digits ${suffix}`,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      checkpointEvery: 10,
    });
    for (const username of [veraName, malloryName]) {
      await organizer.getByLabel("Add a volunteer by username").fill(username);
      await organizer.getByRole("button", { name: "Add to allowlist" }).click();
      await expect(organizer.getByText(`${username} is approved and can now create a token.`)).toBeVisible();
    }
    await expect(organizer.getByTestId("implausible-nodes-empty")).toBeVisible();
    const auxToken = await createAuxToken(organizer, "monitoring aux");
    aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
    const veraToken = await createPeerToken(vera, experimentId, "two honest desktops");
    for (const name of ["vera-1", "vera-2"]) {
      const peer = startPeer(processes, name, {
        server: baseURL,
        token: veraToken,
        dir: join(workDir(), name),
        batchSize: LOCAL_BATCH,
      });
      await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
    }
    await expect
      .poll(async () => (await points(vera, experimentId)).length, { timeout: 180_000, intervals: [2_000] })
      .toBeGreaterThanOrEqual(3);
  });

  const stepsBefore = await points(vera, experimentId);
  const lastStepBefore = Math.max(...stepsBefore.map((point) => point.step));
  await test.step("a second volunteer's node claims 2^47 samples, a step a million ahead and 10^9 samples/s", async () => {
    const malloryToken = await createPeerToken(mallory, experimentId, "a node that lies");
    const key = generateKeyPair();
    const joined = await mallory.request.post("/api/v1/join", {
      data: { token: malloryToken, publicKey: toBase64Url(key.publicKey) },
    });
    expect(joined.status()).toBe(200);
    const { pass, authorityPublicKey } = (await joined.json()) as {
      pass: string;
      authorityPublicKey: string;
    };
    const auxProcess = aux;
    if (auxProcess === undefined) throw new Error("the aux did not start");
    const claims = await runSwarmScript<{ claim: string; epoch: number }>(
      "claims-peer.ts",
      {
        experimentId,
        authorityPublicKey,
        pass,
        secretKey: key,
        addresses: await addressesOf(auxProcess),
        seconds: CLAIM_SECONDS,
      },
      (CLAIM_SECONDS + 90) * 1000,
    );
    expect(claims.map((line) => line.claim)).toContain("a step a million ahead");
    expect(claims.map((line) => line.claim)).toContain("10^9 samples/s");
    // The aux refused them and said why.
    expect(
      auxProcess.filter((record) => String(record.msg).startsWith("refused an implausible progress record")),
    ).not.toHaveLength(0);
  });

  await test.step("the loss curve, the throughput and the leaderboard are the honest peers'", async () => {
    // A few more steps recorded after the claims.
    await expect
      .poll(async () => Math.max(...(await points(vera, experimentId)).map((point) => point.step)), {
        timeout: 120_000,
        intervals: [2_000],
      })
      .toBeGreaterThan(lastStepBefore + 2);
    const after = await points(vera, experimentId);
    const lastStep = Math.max(...after.map((point) => point.step));
    expect(lastStep, "no forged step on the loss curve").toBeLessThan(lastStepBefore + 1_000);
    const view = await getJson<{ swarm: { samplesPerSecond: number } }>(
      vera.request,
      `/api/v1/experiments/${experimentId}`,
    );
    expect(view.swarm.samplesPerSecond).toBeLessThan(1e6);
    // The liar's first record said 2^47 samples; the platform credits what the run can have trained.
    const liar = await leaderboardSamples(vera.request, experimentId, malloryName);
    expect(liar).toBeLessThan(1e6);
    expect(await leaderboardSamples(vera.request, experimentId, veraName)).toBeGreaterThan(0);
    testInfo.annotations.push({
      type: "the liar's credit against its claim of 2^47",
      description: `${liar} samples`,
    });
  });

  await test.step("the manage page lists the liar's node with what it claimed", async () => {
    await organizer.goto(`/experiments/${experimentId}/manage`);
    const row = organizer.locator(`[data-testid="implausible-node"][data-username="${malloryName}"]`);
    await expect
      .poll(
        async () => {
          await organizer.reload();
          return row.count();
        },
        { timeout: 30_000, intervals: [2_000] },
      )
      .toBe(1);
    await expect(row.getByTestId("implausible-node-evidence")).toHaveText(
      /past the swarm's|samples\/s is over 64× the other trainers'/,
    );
    await expect(row.getByRole("button", { name: `Ban ${malloryName}` })).toBeVisible();
    await expect(
      organizer.locator(`[data-testid="implausible-node"][data-username="${veraName}"]`),
    ).toHaveCount(0);
    await screenshots(organizer, testInfo, "manage-implausible-records");
  });
});

/** The run's loss curve as the public page reads it. */
async function points(page: Page, experimentId: string): Promise<MetricPoint[]> {
  const series = await getJson<{ points: MetricPoint[] }>(
    page.request,
    `/api/v1/experiments/${experimentId}/metrics`,
  );
  return series.points;
}
