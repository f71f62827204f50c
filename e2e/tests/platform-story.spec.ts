import { generateKeyPairSync } from "node:crypto";
import { expect, test } from "@playwright/test";
import { baseURL } from "../support/run-env.ts";
import { programCommandPattern } from "../support/runs.ts";
import { PASSWORD, register, screenshots, signIn, signOut } from "../support/ui.ts";

// The platform's story in a real browser: an organizer publishes a run and allowlists a volunteer,
// who signs in and creates a peer token (shown once), then revokes it.

test("an organizer publishes a run and allowlists a volunteer, who creates a token and revokes it", async ({
  browser,
}, testInfo) => {
  const suffix = Date.now().toString(36);
  const organizerName = `organizer-${suffix}`;
  const volunteerName = `volunteer-${suffix}`;
  const experimentId = `story-${suffix}`;
  const experimentName = `Digits together ${suffix}`;

  const organizerContext = await browser.newContext();
  const volunteerContext = await browser.newContext();
  const organizer = await organizerContext.newPage();
  const volunteer = await volunteerContext.newPage();

  // Both register through the form; the volunteer then signs out and comes back later.
  await register(organizer, organizerName);
  await register(volunteer, volunteerName);
  await signOut(volunteer);

  // The organizer creates the experiment. An invalid value is caught next to its field first.
  await organizer.getByRole("link", { name: "New experiment" }).first().click();
  await expect(organizer.getByRole("heading", { level: 1, name: "New experiment" })).toBeVisible();
  await organizer.getByLabel("Experiment id").fill(experimentId);
  await organizer.getByLabel("Name", { exact: true }).fill(experimentName);
  await organizer.getByLabel("Description").fill("An MLP on MNIST, trained by everyone who drops by.");
  const targetBatch = organizer.getByLabel("Target batch size");
  await targetBatch.fill("0");
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await expect(targetBatch).toHaveAttribute("aria-invalid", "true");
  await expect(targetBatch).toHaveAccessibleDescription(/Must be at least 1\./);
  await expect(organizer.getByText("Must be at least 1.")).toBeVisible();
  await expect(organizer).toHaveURL(/\/experiments\/new$/);

  await screenshots(organizer, testInfo, "new-experiment-invalid");
  await targetBatch.fill("512");
  await organizer.getByLabel("Hidden layer sizes").fill("64, 32");
  await organizer.getByLabel("Optimizer", { exact: true }).selectOption("lamb");
  await organizer.getByLabel("Compression").selectOption("blockwise8");
  await organizer.getByLabel("Checkpoint every (steps)").fill("25");
  await organizer.getByRole("button", { name: "Create experiment" }).click();

  await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);
  await expect(organizer.getByRole("heading", { level: 1, name: `Manage ${experimentName}` })).toBeVisible();
  await expect(organizer.getByLabel("Target batch size")).toHaveValue("512");
  await expect(organizer.getByLabel("Optimizer", { exact: true })).toHaveValue("lamb");
  await expect(
    organizer.getByRole("region", { name: "Aux peers" }).getByLabel("the command", { exact: true }),
  ).toHaveText(programCommandPattern("barnraise-aux", baseURL, "<TOKEN>"));

  // ...allowlists the volunteer by username.
  await organizer.getByLabel("Add a volunteer by username").fill(volunteerName);
  await organizer.getByRole("button", { name: "Add to allowlist" }).click();
  await expect(organizer.getByText(`${volunteerName} is approved and can now create a token.`)).toBeVisible();
  const entry = organizer.getByTestId(`allowlist-${volunteerName}`);
  await expect(entry).toBeVisible();
  await expect(entry.getByRole("button", { name: `Ban ${volunteerName}` })).toBeVisible();
  await screenshots(organizer, testInfo, "manage");

  // The volunteer signs in (a wrong password first), opens the run and its volunteer page.
  await volunteer.goto(`/experiments/${experimentId}`);
  await expect(volunteer.getByRole("heading", { level: 1, name: experimentName })).toBeVisible();
  await expect(volunteer.getByText("Target batch", { exact: true })).toBeVisible();
  await expect(volunteer.getByText("512 samples", { exact: true })).toBeVisible();
  await screenshots(volunteer, testInfo, "experiment-visitor");
  await volunteer.getByRole("main").getByRole("link", { name: "Sign in" }).click();
  await signIn(volunteer, volunteerName, `${PASSWORD}!`);
  await expect(volunteer.getByText("Wrong username or password.")).toBeVisible();
  await signIn(volunteer, volunteerName);
  await volunteer.waitForURL(`${baseURL}/experiments/${experimentId}`);
  await expect(volunteer.getByTestId("signed-in-username")).toHaveText(volunteerName);
  await expect(volunteer.getByText("You are approved to join this run.")).toBeVisible();
  await volunteer.getByRole("link", { name: "Set up your computer" }).click();
  await expect(
    volunteer.getByRole("heading", { level: 1, name: `Lend your computer to ${experimentName}` }),
  ).toBeVisible();

  // ...creates a token: the secret and the command with it are shown once.
  await volunteer.getByLabel("Label (optional)").fill("desktop GPU");
  await volunteer.getByRole("button", { name: "Create token" }).click();
  const secretBox = volunteer.getByRole("region", { name: "New token" });
  await expect(secretBox).toBeVisible();
  const token = (await secretBox.getByLabel("the new token").textContent())?.trim() ?? "";
  expect(token).toMatch(/^brp_[A-Za-z0-9_-]{43}$/);
  await expect(secretBox.getByLabel("the command")).toHaveText(
    programCommandPattern("barnraise-peer", baseURL, token),
  );
  const prefix = token.slice(0, 10);
  const tokenList = volunteer.getByRole("list", { name: "Your tokens" });
  await expect(tokenList.getByRole("code").filter({ hasText: `${prefix}…` })).toBeVisible();
  await expect(tokenList.getByText("desktop GPU")).toBeVisible();
  await screenshots(volunteer, testInfo, "volunteer");

  // A node joins with the token, as `barnraise-peer` would (its public key is its libp2p identity).
  const nodeKey = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" }).x;
  const joined = await volunteer.request.post(`/api/v1/experiments/${experimentId}/join`, {
    data: { token, publicKey: nodeKey },
  });
  expect(joined.status()).toBe(200);

  // After a reload the secret is gone for good; the prefix still tells the token apart. The node
  // is listed, not counted: the platform let it in, but no swarm has heard from it (this run has
  // no aux peer and the node no swarm), and the page says so.
  await volunteer.reload();
  await expect(tokenList.getByRole("code").filter({ hasText: `${prefix}…` })).toBeVisible();
  await expect(volunteer.getByRole("region", { name: "New token" })).toHaveCount(0);
  expect(await volunteer.content()).not.toContain(token);
  const nodes = volunteer.getByRole("list", { name: "Nodes" });
  await expect(nodes.getByText("Not counted", { exact: true })).toBeVisible();
  await expect(nodes.getByText(/the swarm has not heard from it/)).toBeVisible();

  // ...and revokes it.
  await tokenList.getByRole("button", { name: `Revoke ${prefix}…` }).click();
  await tokenList.getByRole("button", { name: `Yes, revoke ${prefix}…` }).click();
  await expect(volunteer.getByText(`Token ${prefix}… is revoked.`)).toBeVisible();
  await expect(tokenList.getByText("Revoked", { exact: true })).toBeVisible();
  await expect(tokenList.getByRole("button", { name: `Revoke ${prefix}…` })).toHaveCount(0);

  // "My nodes" says, in a sentence, why the node no longer counts.
  await volunteer.getByRole("link", { name: "My nodes" }).click();
  await expect(volunteer.getByRole("heading", { level: 1, name: "My nodes" })).toBeVisible();
  await expect(volunteer.getByText("0 of 1 node counted.")).toBeVisible();
  await expect(nodes.getByText("Not counted", { exact: true })).toBeVisible();
  await expect(nodes.getByText("The token this node joined with was revoked")).toBeVisible();
  await expect(nodes.getByRole("link", { name: experimentName })).toBeVisible();
  await screenshots(volunteer, testInfo, "my-nodes");

  await organizerContext.close();
  await volunteerContext.close();
});

test("a volunteer asks to join and the organizer approves the request", async ({ browser }) => {
  const suffix = Date.now().toString(36);
  const organizerName = `host-${suffix}`;
  const volunteerName = `asker-${suffix}`;
  const experimentId = `requests-${suffix}`;

  const organizerContext = await browser.newContext();
  const volunteerContext = await browser.newContext();
  const organizer = await organizerContext.newPage();
  const volunteer = await volunteerContext.newPage();

  await register(organizer, organizerName);
  await organizer.goto("/experiments/new");
  await organizer.getByLabel("Experiment id").fill(experimentId);
  await organizer.getByLabel("Name", { exact: true }).fill(`Requests ${suffix}`);
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);

  // A volunteer who is not on the allowlist cannot open the volunteer page, and asks to join.
  await register(volunteer, volunteerName);
  await volunteer.goto(`/experiments/${experimentId}/volunteer`);
  await expect(volunteer.getByText("You are not on this experiment’s allowlist yet.")).toBeVisible();
  await volunteer.goto(`/experiments/${experimentId}`);
  await volunteer.getByRole("button", { name: "Request to join" }).click();
  await expect(
    volunteer.getByText("Your request to join is waiting for the organizer’s approval."),
  ).toBeVisible();

  // The volunteer may not manage the experiment.
  await volunteer.goto(`/experiments/${experimentId}/manage`);
  await expect(
    volunteer.getByRole("heading", { level: 1, name: "Only the organizer can manage this experiment" }),
  ).toBeVisible();

  // The organizer sees the request and approves it.
  await organizer.reload();
  const request = organizer.getByTestId(`allowlist-${volunteerName}`);
  await expect(organizer.getByRole("region", { name: /Requests to join/ })).toContainText(volunteerName);
  await request.getByRole("button", { name: `Approve ${volunteerName}` }).click();
  await expect(organizer.getByText(`${volunteerName} is approved and can now create a token.`)).toBeVisible();
  await expect(organizer.getByRole("region", { name: /Approved/ })).toContainText(volunteerName);

  await volunteer.goto(`/experiments/${experimentId}`);
  await expect(volunteer.getByRole("link", { name: "Set up your computer" })).toBeVisible();

  // Editing the config bumps its version; the public page shows the new recipe.
  await organizer.getByLabel("Target batch size").fill("2048");
  await organizer.getByRole("button", { name: "Save changes" }).click();
  await expect(
    organizer.getByText("Saved. Peers receive config version 2 when they next fetch it."),
  ).toBeVisible();
  await volunteer.reload();
  await expect(volunteer.getByText("2,048 samples", { exact: true })).toBeVisible();

  // Pausing shows on the public page.
  await organizer.getByRole("button", { name: "Pause the run" }).click();
  await expect(organizer.getByText("The run is paused.", { exact: true })).toBeVisible();
  await volunteer.reload();
  await expect(volunteer.getByText("The organizer has paused this run")).toBeVisible();

  // An unknown experiment is a 404 page.
  const missing = await volunteer.goto(`/experiments/no-such-run-${suffix}`);
  expect(missing?.status()).toBe(404);
  await expect(volunteer.getByRole("heading", { level: 1, name: "Page not found" })).toBeVisible();

  await organizerContext.close();
  await volunteerContext.close();
});
