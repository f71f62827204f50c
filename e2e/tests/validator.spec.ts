import { join } from "node:path";
import { expect, test, type Page } from "@playwright/test";
import { PeerExit, startAttackerPeer, startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import { createAuxToken, createPeerToken, publishRun } from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register, screenshots } from "../support/ui.ts";

// The aux as validator (issue 19): an organizer's CenteredClip run trains with an aux and a
// volunteer's two honest peers, while a third volunteer's peer sends every gradient sign-flipped
// and 1,000 times too large. The aux samples what each trainer contributes to the rounds it helps
// average, measures the held-out loss after a step along it, and flags the attacker; the manage page
// lists them with the evidence, a rollback to a checkpoint before it, and a ban. One click on "Ban"
// and the attacker's peer is refused by the swarm and exits, banned.

const TARGET_BATCH = 512;
const LOCAL_BATCH = 64;
const CHECKPOINT_EVERY = 2;
/** The attacker's factor on every vector it contributes. */
const ATTACK_SCALE = -1000;

const { processes, contexts, workDir } = processStory("validator");

test("the validator flags the attacker's peer on the manage page, and one click bans it", async ({
  browser,
}, testInfo) => {
  test.setTimeout(8 * 60_000);
  const suffix = Date.now().toString(36);
  const organizerName = `keeper-${suffix}`;
  const veraName = `vera-${suffix}`;
  const malloryName = `mallory-${suffix}`;
  const experimentId = `guarded-${suffix}`;

  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const organizer = await newPage();
  const vera = await newPage();
  const mallory = await newPage();
  const honest: RunningProcess[] = [];
  let aux: RunningProcess | undefined;
  let attacker: RunningProcess | undefined;

  await test.step("the organizer publishes a CenteredClip run, allowlists two volunteers and starts the aux", async () => {
    await register(organizer, organizerName);
    await register(vera, veraName);
    await register(mallory, malloryName);
    await publishRun(organizer, {
      id: experimentId,
      name: `Guarded digits ${suffix}`,
      targetBatch: TARGET_BATCH,
      localBatch: LOCAL_BATCH,
      checkpointEvery: CHECKPOINT_EVERY,
      aggregation: "centered-clip",
    });
    for (const username of [veraName, malloryName]) {
      await organizer.getByLabel("Add a volunteer by username").fill(username);
      await organizer.getByRole("button", { name: "Add to allowlist" }).click();
      await expect(organizer.getByText(`${username} is approved and can now create a token.`)).toBeVisible();
    }
    await expect(organizer.getByTestId("validator-flags-empty")).toHaveText("No node is flagged.");
    const auxToken = await createAuxToken(organizer, "validating aux");
    aux = startAux(processes, "aux", { server: baseURL, token: auxToken, dir: join(workDir(), "aux") });
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
  });

  await test.step("two honest peers and an attacker's peer train together", async () => {
    const veraToken = await createPeerToken(vera, experimentId, "two honest desktops");
    const malloryToken = await createPeerToken(mallory, experimentId, "a tampered peer");
    for (const name of ["vera-1", "vera-2"]) {
      honest.push(
        startPeer(processes, name, {
          server: baseURL,
          token: veraToken,
          dir: join(workDir(), name),
          batchSize: LOCAL_BATCH,
        }),
      );
    }
    attacker = startAttackerPeer(processes, "mallory", {
      server: baseURL,
      token: malloryToken,
      dir: join(workDir(), "mallory"),
      batchSize: LOCAL_BATCH,
      scale: ATTACK_SCALE,
    });
    for (const peer of [...honest, attacker]) {
      await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
    }
    await attacker.waitForRecord(
      "its first tampered round",
      recordMatcher("sending tampered contributions"),
      180_000,
    );
  });

  const manage = `/experiments/${experimentId}/manage`;
  const flagOf = (username: string) =>
    organizer.locator(`[data-testid="validator-flag"][data-username="${username}"]`);
  let flaggedAt = 0;
  await test.step("the aux flags the attacker, and the manage page lists them with the evidence", async () => {
    const attackStarted = Date.now();
    const auxProcess = aux;
    if (auxProcess === undefined) throw new Error("the aux did not start");
    await auxProcess.waitForRecord(
      "the attacker flagged",
      recordMatcher(/^flagged 12D3KooW\w+: its contributions raised the held-out loss/),
      240_000,
    );
    await organizer.goto(manage);
    await expect
      .poll(
        async () => {
          await organizer.reload();
          return flagOf(malloryName).count();
        },
        { timeout: 60_000, intervals: [2_000] },
      )
      .toBe(1);
    flaggedAt = Date.now();
    testInfo.annotations.push({
      type: "first tampered round to the flag on the manage page",
      description: `${((flaggedAt - attackStarted) / 1000).toFixed(1)} s`,
    });

    const row = flagOf(malloryName);
    await expect(row.getByText("flagged", { exact: true })).toBeVisible();
    // The evidence: the loss before and after a step along its contribution, against the median's.
    const evidence = (await row.getByTestId("validator-flag-evidence").textContent()) ?? "";
    const match =
      /^Epoch (\d+): a step along its contribution took the held-out loss from ([\d.]+) to ([^ ]+)/.exec(
        evidence,
      );
    expect(match, evidence).not.toBeNull();
    const before = Number(match?.[2]);
    const after = match?.[3] === "a" ? Number.POSITIVE_INFINITY : Number(match?.[3]);
    expect(after, evidence).toBeGreaterThan(before);
    expect(evidence).toMatch(/its contribution is \d+(\.\d+)?× the median’s size/);
    await expect(row).toContainText(/Hurt in [23] of its last [23] samples/);
    // The rollback to the last checkpoint before it hurt sits beside the ban.
    await expect(row.getByRole("button", { name: /^Roll back to step \d+$/ })).toBeVisible();
    // The honest volunteer is not flagged.
    await expect(flagOf(veraName)).toHaveCount(0);
    // The aux named the attacker's node: the PeerId on the page is the one it warned about.
    const peerId = await row.getAttribute("data-peer-id");
    expect(
      auxProcess.filter((record) => record.peer === peerId && String(record.msg).startsWith("flagged ")),
    ).not.toHaveLength(0);
    await screenshots(organizer, testInfo, "manage-validator-flag");
  });

  await test.step("one click bans the attacker: their peer is refused and exits within 30 s", async () => {
    const row = flagOf(malloryName);
    await row.getByRole("button", { name: `Ban ${malloryName}` }).click();
    await expect(
      organizer.getByText(`${malloryName} is banned; their nodes are no longer counted.`),
    ).toBeVisible();
    const bannedAt = Date.now();
    const attackerProcess = attacker;
    if (attackerProcess === undefined) throw new Error("the attacker did not start");
    const status = await attackerProcess.waitForExit(30_000);
    expect(status, attackerProcess.tail(20)).toEqual({ code: PeerExit.banned, signal: null });
    expect(attackerProcess.filter((record) => record.code === "BANNED")).not.toHaveLength(0);
    testInfo.annotations.push({
      type: "ban to the attacker's exit",
      description: `${((Date.now() - bannedAt) / 1000).toFixed(1)} s`,
    });
    // The page says so: banned in the flag's row and on the allowlist.
    await organizer.reload();
    await expect(flagOf(malloryName).getByText("banned", { exact: true })).toBeVisible();
    await expect(flagOf(malloryName).getByRole("button", { name: `Ban ${malloryName}` })).toHaveCount(0);
    const bannedList = organizer.getByRole("region", { name: /^Banned/ });
    await expect(bannedList.getByTestId(`allowlist-${malloryName}`)).toBeVisible();
    // The honest peers train on.
    for (const peer of honest) expect(peer.status).toBeUndefined();
  });
});
