import { generateKeyPairSync } from "node:crypto";
import { expect, test } from "@playwright/test";
import { baseURL } from "../support/run-env.ts";
import { register } from "../support/ui.ts";

// One token, a bounded number of machines: the organizer sets the limit on the manage page, a
// machine past it is refused at the join the volunteer's program makes, and the volunteer page shows
// the places in use and retires a machine to free one.

function nodeKey(): string {
  const jwk = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" });
  if (jwk.x === undefined) throw new Error("an Ed25519 key has an x");
  return jwk.x;
}

test("a token runs as many machines as the organizer allows, and a retired machine frees its place", async ({
  browser,
}) => {
  const suffix = Date.now().toString(36);
  const experimentId = `limits-${suffix}`;
  const volunteerName = `many-${suffix}`;
  const organizerContext = await browser.newContext();
  const volunteerContext = await browser.newContext();
  const organizer = await organizerContext.newPage();
  const volunteer = await volunteerContext.newPage();

  await register(organizer, `owner-${suffix}`);
  await organizer.goto("/experiments/new");
  await organizer.getByLabel("Experiment id").fill(experimentId);
  await organizer.getByLabel("Name", { exact: true }).fill(`Limits ${suffix}`);
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);

  // The organizer allows one machine per token.
  await expect(organizer.getByLabel("Machines per token")).toHaveValue("8");
  await organizer.getByLabel("Machines per token").fill("1");
  await organizer.getByRole("button", { name: "Save limits" }).click();
  await expect(organizer.getByText("Saved: at most 1 per token and 32 per volunteer.")).toBeVisible();
  await register(volunteer, volunteerName);
  await organizer.getByLabel("Add a volunteer by username").fill(volunteerName);
  await organizer.getByRole("button", { name: "Add to allowlist" }).click();
  await expect(organizer.getByText(`${volunteerName} is approved and can now create a token.`)).toBeVisible();

  // The volunteer makes a token; a first machine joins with it, a second is refused.
  await volunteer.goto(`/experiments/${experimentId}/volunteer`);
  await volunteer.getByRole("button", { name: "Create token" }).click();
  const token =
    (
      await volunteer.getByRole("region", { name: "New token" }).getByLabel("the new token").textContent()
    )?.trim() ?? "";
  const join = (publicKey: string) =>
    volunteer.request.post(`/api/v1/join`, { data: { token, publicKey }, failOnStatusCode: false });
  const first = nodeKey();
  expect((await join(first)).status()).toBe(200);
  const second = nodeKey();
  const refused = await join(second);
  expect(refused.status()).toBe(409);
  expect(await refused.json()).toMatchObject({ error: { code: "TOO_MANY_NODES" } });

  // The page says how many places are in use, and retires the first machine.
  await volunteer.reload();
  await expect(
    volunteer.getByText("1 machine in use. The organizer allows 1 per token and 32 in all"),
  ).toBeVisible();
  const nodes = volunteer.getByRole("list", { name: "Nodes" });
  await nodes.getByRole("button", { name: /^Retire / }).click();
  await nodes.getByRole("button", { name: /^Yes, retire / }).click();
  await expect(nodes.getByText("Retired", { exact: true })).toBeVisible();
  await expect(volunteer.getByText("0 machines in use.")).toBeVisible();
  await expect(nodes.getByText("You retired this machine")).toBeVisible();

  // The second machine now has the place; the retired one may not come back.
  expect((await join(second)).status()).toBe(200);
  const back = await join(first);
  expect(back.status()).toBe(403);
  expect(await back.json()).toMatchObject({ error: { code: "NODE_RETIRED" } });

  await organizerContext.close();
  await volunteerContext.close();
});
