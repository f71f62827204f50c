import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, test, type Page } from "@playwright/test";
import { encodePublicKey, generateKeyPair } from "@barnraise/protocol";
import {
  attachDir,
  DEMO_EXPERIMENT_ID,
  demoLog,
  isShared,
  keepLogs,
  killDemo,
  peerSteps,
  pollUntil,
  type PeerStep,
  recordedSteps,
  startDemo,
} from "../support/demo.ts";
import { ProcessSet, type LogRecord } from "../support/processes.ts";
import { e2eRun } from "../support/run-env.ts";
import { PASSWORD, register, signIn, signOut } from "../support/ui.ts";

// A volunteer with nothing installed lends a browser tab to the demo's run: `npm run demo` (its aux
// and two CLI peers) trains; a new volunteer is not on the allowlist, sees no way to contribute and
// gets no pass; once the organizer approves them, one click on "Contribute from this browser"
// makes the tab a member that averages with the CLI peers within 60 s, holds the same parameters
// after a step as they do, and is credited on the leaderboard as a browser. Closing the tab fails
// no later round of the others; a tab of a volunteer the organizer bans is refused within 30 s.

const PEERS = 2;
/** The demo's own stories use demoPort and the next; this one runs on the port after them. */
const port = e2eRun.demoPort + 2;
const base = `http://localhost:${port}`;
const CLICK_TO_AVERAGE_MS = 60_000;
const BAN_REFUSED_MS = 30_000;

let dataDir = "";
let processes = new ProcessSet();

test.beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "barnraise-e2e-tab-"));
  processes = new ProcessSet();
});

test.afterEach(async () => {
  const testInfo = test.info();
  await processes.stopAll(30_000);
  const killed = await killDemo(dataDir);
  if (testInfo.status !== testInfo.expectedStatus) {
    await processes.attachLogs(testInfo);
    const logs = testInfo.outputPath("demo-logs");
    await keepLogs(dataDir, logs);
    await attachDir(testInfo, logs, "demo: ");
  }
  await rm(dataDir, { recursive: true, force: true });
  expect(killed, "processes of the demo still running after it was stopped").toEqual([]);
});

test("a signed-in volunteer contributes from a browser tab alongside the demo's CLI peers", async ({
  browser,
}, testInfo) => {
  test.setTimeout(10 * 60_000);
  const demo = startDemo(processes, "npm-run-demo", dataDir, port);
  const username = `tabby-${Date.now().toString(36)}`;
  const organizerContext = await browser.newContext({ baseURL: base });
  const volunteerContext = await browser.newContext({ baseURL: base });
  const organizer = await organizerContext.newPage();
  let tab = await volunteerContext.newPage();

  await test.step("the demo's CLI peers train", async () => {
    await pollUntil("the platform recording 2 steps", Date.now() + 180_000, demo, async () => {
      const points = await recordedSteps(port);
      if (points === undefined) return { waiting: "the platform does not answer yet" };
      return points.length >= 2 ? { done: points.length } : { waiting: `${points.length} steps recorded` };
    });
  });

  await test.step("a volunteer who is not on the allowlist gets no pass", async () => {
    await register(tab, username);
    await tab.goto(`/experiments/${DEMO_EXPERIMENT_ID}`);
    await expect(tab.getByRole("heading", { name: "Take part" })).toBeVisible();
    await expect(tab.getByTestId("contribute-panel")).toHaveCount(0);
    // What the tab's worker would ask, from the same page and session.
    const answer = await browserJoin(tab, encodePublicKey(generateKeyPair().publicKey));
    expect(answer).toEqual({ status: 403, code: "NOT_ALLOWLISTED" });
  });

  await test.step("the organizer approves the volunteer", async () => {
    const password = await demoPassword();
    await organizer.goto(
      `/sign-in?callbackUrl=${encodeURIComponent(`/experiments/${DEMO_EXPERIMENT_ID}/manage`)}`,
    );
    await signIn(organizer, "demo-organizer", password);
    await organizer.waitForURL(/\/manage$/);
    await organizer.getByLabel("Add a volunteer by username").fill(username);
    await organizer.getByRole("button", { name: "Add to allowlist" }).click();
    await expect(organizer.getByTestId(`allowlist-${username}`)).toBeVisible();
  });

  let tabStep = { step: 0, groupSize: 0, digest: "" };
  await test.step("one click, and within 60 s the tab averages with the CLI peers", async () => {
    const page = await tab.goto(`/experiments/${DEMO_EXPERIMENT_ID}`);
    // No other site may frame the page (and its button); workers only from the platform.
    expect(page?.headers()["content-security-policy"]).toContain("frame-ancestors 'none'");
    const started = tab.waitForEvent("worker");
    const clickedAt = Date.now();
    await tab.getByRole("button", { name: "Contribute from this browser" }).click();
    // The worker's script comes with its own policy: its origin, wasm, and WebSockets, nothing else.
    const workerScript = await tab.request.get((await started).url());
    expect(workerScript.headers()["content-security-policy"]).toBe(
      "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self' ws: wss:; " +
        "worker-src 'none'; base-uri 'none'; form-action 'none'",
    );
    await expect(tab.getByTestId("tab-group-size")).toBeVisible({ timeout: CLICK_TO_AVERAGE_MS });
    await expect
      .poll(async () => Number(await tab.getByTestId("tab-group-size").textContent()), {
        timeout: Math.max(1, clickedAt + CLICK_TO_AVERAGE_MS - Date.now()),
      })
      .toBeGreaterThanOrEqual(2);
    testInfo.annotations.push(
      { type: "click to a shared step", description: `${((Date.now() - clickedAt) / 1000).toFixed(1)} s` },
      {
        type: "tab: first sample",
        description: (await tab.getByTestId("tab-contributed").textContent()) ?? "",
      },
      { type: "tab: backend", description: (await tab.getByTestId("tab-backend").textContent()) ?? "" },
    );
  });

  await test.step("after a step the tab holds the same parameters as the CLI peers", async () => {
    // Read together from one render: the step, its group and the digest of the parameters after it.
    const text = (await tab.getByTestId("tab-last-step").textContent()) ?? "";
    const match = /step (\d+) with (\d+) members, parameters ([0-9a-f]+)/.exec(text);
    expect(match, text).not.toBeNull();
    tabStep = { step: Number(match?.[1]), groupSize: Number(match?.[2]), digest: match?.[3] ?? "" };
    for (let peer = 1; peer <= PEERS; peer++) {
      const record = await pollUntil<LogRecord>(
        `peer ${peer} logging step ${tabStep.step}`,
        Date.now() + 15_000,
        demo,
        async () => {
          const found = (await demoLog(dataDir, `peer-${peer}.log`)).find(
            (r) => r.msg === `step ${tabStep.step}`,
          );
          return found === undefined ? { waiting: "not yet" } : { done: found };
        },
      );
      expect(record.stateDigest, `peer ${peer}'s parameters after step ${tabStep.step}`).toBe(tabStep.digest);
      expect(Number(record.groupSize), `peer ${peer}'s group at step ${tabStep.step}`).toBe(
        tabStep.groupSize,
      );
    }
    // The tab reaches the CLI peers (TCP and WebRTC-direct, no WebSockets) over WebRTC, through
    // its page (a worker has no RTCPeerConnection of its own), not through the aux's relay.
    await expect(tab.getByTestId("tab-bytes-sent")).toContainText(`(${PEERS} over WebRTC)`, {
      timeout: 30_000,
    });
    await tab.getByTestId("contribute-panel").screenshot({ path: testInfo.outputPath("tab-training.png") });
    await testInfo.attach("tab while training", {
      path: testInfo.outputPath("tab-training.png"),
      contentType: "image/png",
    });
    const cliSpeeds = (await demoLog(dataDir, "peer-1.log"))
      .filter((r) => r.msg === "status" && r.phase === "training")
      .map((r) => Number(r.localSamplesPerSecond))
      .filter((speed) => speed > 0);
    testInfo.annotations.push(
      { type: "tab: samples/s", description: (await tab.getByTestId("tab-speed").textContent()) ?? "" },
      { type: "CLI peer 1: samples/s", description: String(Math.round(cliSpeeds.at(-1) ?? 0)) },
      { type: "tab: sent", description: (await tab.getByTestId("tab-bytes-sent").textContent()) ?? "" },
    );
  });

  await test.step("the volunteer pauses the tab, and it pauses while hidden; both resume", async () => {
    const phase = tab.getByTestId("tab-phase");
    await tab.getByRole("button", { name: "Pause" }).click();
    // Shown once the node itself holds (its status says "paused"), not when the button is clicked.
    await expect(phase).toHaveText("paused by you", { timeout: 15_000 });
    await tab.getByRole("button", { name: "Resume" }).click();
    await expect(phase).not.toContainText("paused", { timeout: 15_000 });
    await setHidden(tab, true);
    await expect(phase).toHaveText("paused while this tab is hidden", { timeout: 15_000 });
    // The swarm knows why (the tab's progress records), and so does My nodes, through the aux.
    const peerId = await tabPeerId(tab);
    const myNodes = await volunteerContext.newPage();
    await myNodes.goto("/me/nodes");
    const row = myNodes
      .getByRole("list", { name: "Nodes" })
      .getByRole("listitem")
      .filter({ has: myNodes.locator(`code[title="${peerId}"]`) });
    await expect(async () => {
      await myNodes.reload();
      await expect(row.getByText("Paused: this tab is hidden.")).toBeVisible({ timeout: 1_000 });
    }).toPass({ timeout: 30_000 });
    await myNodes.close();
    await setHidden(tab, false);
    await expect(phase).not.toContainText("paused", { timeout: 15_000 });
  });

  await test.step("the leaderboard credits the tab as a browser", async () => {
    await expect
      .poll(
        async () => {
          const response = await organizer.request.get(
            `/api/v1/experiments/${DEMO_EXPERIMENT_ID}/leaderboard`,
          );
          const { entries } = (await response.json()) as {
            entries: { username: string; samples: number; nodeKinds: string[] }[];
          };
          const entry = entries.find((e) => e.username === username);
          return entry === undefined ? "not listed" : { credited: entry.samples > 0, kinds: entry.nodeKinds };
        },
        { timeout: 60_000 },
      )
      .toEqual({ credited: true, kinds: ["browser"] });
    await tab.reload();
    const row = tab.getByRole("row").filter({ hasText: username });
    await expect(row.getByTestId("leaderboard-node-kinds")).toHaveText("Browser");
  });

  await test.step("closing the tab fails no later round of the CLI peers", async () => {
    // The reload above ended the first tab's node; a tab that trains again is the one closed.
    await contribute(tab);
    const inFlight = Number(await tab.getByTestId("tab-step").textContent());
    await tab.close();
    const closedAt = Date.now();
    for (let peer = 1; peer <= PEERS; peer++) {
      const after = await pollUntil<PeerStep[]>(
        `peer ${peer} taking 3 steps after the close`,
        Date.now() + 60_000,
        demo,
        async () => {
          const steps = (await peerSteps(dataDir, peer)).filter((step) => step.time > closedAt);
          return steps.length >= 3 ? { done: steps } : { waiting: `${steps.length} steps` };
        },
      );
      expect(after.every(isShared), `peer ${peer}'s steps after the close`).toBe(true);
      // The round in flight when the tab closed may go on without it; none after it may fail.
      const failed = (await demoLog(dataDir, `peer-${peer}.log`)).filter(
        (record) =>
          record.time !== undefined && Number(record.time) > closedAt && failedStep(record) > inFlight + 1,
      );
      expect(failed.map((record) => record.msg)).toEqual([]);
    }
  });

  await test.step("retired under My nodes, the tab's node stops; the next click joins as a new node", async () => {
    tab = await volunteerContext.newPage();
    await tab.goto(`/experiments/${DEMO_EXPERIMENT_ID}`);
    await contribute(tab);
    const retired = await tabPeerId(tab);
    const myNodes = await volunteerContext.newPage();
    await myNodes.goto("/me/nodes");
    const row = myNodes
      .getByRole("list", { name: "Nodes" })
      .getByRole("listitem")
      .filter({ has: myNodes.locator(`code[title="${retired}"]`) });
    await row.getByRole("button", { name: /^Retire / }).click();
    await row.getByRole("button", { name: /^Yes, retire / }).click();
    await expect(row.getByText("Retired", { exact: true })).toBeVisible();
    await myNodes.close();
    const panel = tab.getByTestId("contribute-panel");
    await expect(panel.getByRole("status")).toContainText("retired under My nodes", {
      timeout: BAN_REFUSED_MS,
    });
    await contribute(tab, "Contribute again");
    const renewed = await tabPeerId(tab);
    expect(renewed).not.toBe(retired);
  });

  await test.step("another account in the same browser contributes with a key of its own", async () => {
    // The volunteer's tab keeps contributing; the organizer signs in to this browser in another tab.
    // (One contributing tab per browser, so the volunteer's tab leaves first.)
    const volunteerNode = await tabPeerId(tab);
    await tab.getByRole("button", { name: "Stop contributing" }).click();
    await expect(tab.getByRole("button", { name: "Contribute again" })).toBeVisible({ timeout: 60_000 });
    // The models and shards the tab cached go with the volunteer's session; its key stays.
    expect(await tabCaches(tab)).not.toEqual([]);
    await signOut(tab);
    expect(await tabCaches(tab)).toEqual([]);
    await tab.goto(`/sign-in?callbackUrl=${encodeURIComponent(`/experiments/${DEMO_EXPERIMENT_ID}`)}`);
    await signIn(tab, "demo-organizer", await demoPassword());
    await tab.waitForURL(new RegExp(`/experiments/${DEMO_EXPERIMENT_ID}$`));
    await contribute(tab);
    expect(await tabPeerId(tab)).not.toBe(volunteerNode);
    await tab.getByRole("button", { name: "Stop contributing" }).click();
    await expect(tab.getByRole("button", { name: "Contribute again" })).toBeVisible({ timeout: 60_000 });
    await signOut(tab);
    await tab.goto(`/sign-in?callbackUrl=${encodeURIComponent(`/experiments/${DEMO_EXPERIMENT_ID}`)}`);
    await signIn(tab, username, PASSWORD);
    await tab.waitForURL(new RegExp(`/experiments/${DEMO_EXPERIMENT_ID}$`));
    await contribute(tab);
    expect(await tabPeerId(tab)).toBe(volunteerNode);
  });

  await test.step("a banned volunteer's tab is refused by the swarm within 30 s", async () => {
    // One contributing tab per browser: a second one says so and starts nothing.
    const second = await volunteerContext.newPage();
    await second.goto(`/experiments/${DEMO_EXPERIMENT_ID}`);
    await second.getByRole("button", { name: "Contribute from this browser" }).click();
    await expect(second.getByTestId("contribute-panel").getByRole("status")).toContainText(
      "Another tab of this browser is already contributing",
    );
    await second.close();
    await organizer.reload();
    await organizer
      .getByTestId(`allowlist-${username}`)
      .getByRole("button", { name: `Ban ${username}` })
      .click();
    await expect(
      organizer.getByText(`${username} is banned; their nodes are no longer counted.`),
    ).toBeVisible();
    const bannedAt = Date.now();
    const panel = tab.getByTestId("contribute-panel");
    await expect(panel.getByRole("status")).toContainText(/banned/i, { timeout: BAN_REFUSED_MS });
    await expect(panel.getByRole("button", { name: "Contribute again" })).toBeVisible();
    testInfo.annotations.push({
      type: "ban to the tab's refusal",
      description: `${((Date.now() - bannedAt) / 1000).toFixed(1)} s`,
    });
    // And the platform refuses the banned volunteer's browser a pass for any key.
    expect(await browserJoin(tab, encodePublicKey(generateKeyPair().publicKey))).toEqual({
      status: 403,
      code: "BANNED",
    });
  });
});

/** Clicks "Contribute from this browser" (or `button`) and waits for the tab's first step with the swarm. */
async function contribute(page: Page, button = "Contribute from this browser"): Promise<void> {
  await page.getByRole("button", { name: button }).click();
  await expect(page.getByTestId("tab-step")).toBeVisible({ timeout: CLICK_TO_AVERAGE_MS });
}

/** The IndexedDB databases of the models and shards the contributing tab cached in this browser. */
async function tabCaches(page: Page): Promise<string[]> {
  return page.evaluate(async () =>
    (await indexedDB.databases())
      .map(({ name }) => name ?? "")
      .filter((name) => name.startsWith("barnraise-blobs-tab-")),
  );
}

/** Makes the page's document say it is hidden (or visible again), as switching tabs does. */
async function setHidden(page: Page, hidden: boolean): Promise<void> {
  await page.evaluate((hidden) => {
    Object.defineProperty(document, "visibilityState", {
      configurable: true,
      get: () => (hidden ? "hidden" : "visible"),
    });
    document.dispatchEvent(new Event("visibilitychange"));
  }, hidden);
}

/** The PeerId of the tab's node, as its panel shows it. */
async function tabPeerId(page: Page): Promise<string> {
  const id = (await page.getByTestId("tab-peer-id").textContent()) ?? "";
  expect(id).toMatch(/^12D3Koo/);
  return id;
}

/** POST browser-join from `page`, as its worker does (same origin, the session's cookie). */
async function browserJoin(page: Page, publicKey: string): Promise<{ status: number; code: string }> {
  return page.evaluate(
    async ({ experimentId, publicKey }) => {
      const response = await fetch(`/api/v1/experiments/${experimentId}/browser-join`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ publicKey }),
      });
      const body = (await response.json()) as { error?: { code?: string } };
      return { status: response.status, code: body.error?.code ?? "" };
    },
    { experimentId: DEMO_EXPERIMENT_ID, publicKey },
  );
}

/** The step a failed round was for ("averaging for step N failed"), or -1 for any other record. */
function failedStep(record: LogRecord): number {
  const match = /^averaging for step (\d+) failed/.exec(String(record.msg));
  return match === null ? -1 : Number(match[1]);
}

/** The demo organizer's password, which the demo generated into its data directory. */
async function demoPassword(): Promise<string> {
  const secrets = await readFile(join(dataDir, "secrets.env"), "utf8");
  const password = /^DEMO_ORGANIZER_PASSWORD=(.+)$/m.exec(secrets)?.[1];
  if (password === undefined) throw new Error("the demo wrote no organizer password");
  return password;
}
