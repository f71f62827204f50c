import {
  decodePublicKey,
  generateKeyPair,
  signRequest,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { expect, test, type APIRequestContext } from "@playwright/test";
import { baseURL } from "../support/run-env.ts";
import { createAuxToken, getJson } from "../support/runs.ts";
import { register } from "../support/ui.ts";

// A broken point on the public loss curve: the aux (this test, joined with the organizer's aux
// token, signing its reports as the aux program does) reports three steps, one of them with a loss
// that makes no sense. The organizer discards that step on the manage page, and the public metrics
// no longer have it; a Restore brings it back.

interface Aux {
  readonly key: KeyPair;
  readonly pass: string;
  readonly authority: Uint8Array;
}

interface Metrics {
  readonly points: readonly { step: number; loss: number }[];
}

/** Joins `experimentId` with the aux `token`, as a fresh node key. */
async function joinAsAux(api: APIRequestContext, experimentId: string, token: string): Promise<Aux> {
  const key = generateKeyPair();
  const joined = await api.post(`/api/v1/experiments/${experimentId}/join`, {
    data: { token, publicKey: toBase64Url(key.publicKey) },
  });
  expect(joined.status(), await joined.text()).toBe(200);
  const body = (await joined.json()) as { pass: string; authorityPublicKey: string };
  return { key, pass: body.pass, authority: decodePublicKey(body.authorityPublicKey) };
}

/** The aux's signed report of one aggregated step. */
async function reportStep(
  api: APIRequestContext,
  aux: Aux,
  experimentId: string,
  step: number,
  loss: number,
): Promise<void> {
  const path = `/api/v1/experiments/${experimentId}/metrics`;
  const body = new TextEncoder().encode(
    JSON.stringify({ step, loss, samplesPerSecond: 50, alivePeers: 1, time: Date.now(), peers: [] }),
  );
  const token = signRequest(nodeCrypto, aux.key, {
    pass: aux.pass,
    recipientPublicKey: aux.authority,
    scope: `POST ${path}`,
    body,
    time: Date.now(),
  });
  const response = await api.post(path, {
    headers: { authorization: `Barnraise ${token}`, "content-type": "application/json" },
    data: Buffer.from(body),
  });
  expect(response.status(), await response.text()).toBe(200);
  expect(await response.json()).toMatchObject({ stored: true });
}

test("the organizer discards a broken loss-curve point, and the public curve leaves it out", async ({
  browser,
  request,
}) => {
  const suffix = Date.now().toString(36);
  const experimentId = `discard-${suffix}`;
  const context = await browser.newContext();
  const organizer = await context.newPage();

  await register(organizer, `curator-${suffix}`);
  await organizer.goto("/experiments/new");
  await organizer.getByLabel("Experiment id").fill(experimentId);
  await organizer.getByLabel("Name", { exact: true }).fill(`Discard ${suffix}`);
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);

  const aux = await joinAsAux(request, experimentId, await createAuxToken(organizer, "reporter"));
  await reportStep(request, aux, experimentId, 1, 2.3);
  await reportStep(request, aux, experimentId, 2, 1e6);
  await reportStep(request, aux, experimentId, 3, 2.1);
  const publicSteps = async () =>
    (await getJson<Metrics>(request, `/api/v1/experiments/${experimentId}/metrics`)).points.map(
      (point) => point.step,
    );
  expect(await publicSteps()).toEqual([1, 2, 3]);

  // The organizer discards step 2 on the manage page.
  await organizer.reload();
  const section = organizer.getByRole("region", { name: "Loss curve points" });
  await expect(section.getByTestId("discarded-points-empty")).toBeVisible();
  await section.getByLabel("From step").fill("2");
  await section.getByLabel("To step").fill("2");
  await section.getByRole("button", { name: "Discard", exact: true }).click();
  await expect(section.getByText("Discarded 1 point of step 2: no view shows them now.")).toBeVisible();
  const row = section.getByTestId("discarded-point-row");
  await expect(row).toHaveCount(1);
  await expect(row).toHaveAttribute("data-step", "2");
  await expect(row).toContainText("1000000");

  // Anyone reading the public curve no longer gets it.
  expect(await publicSteps()).toEqual([1, 3]);

  // Restored, it is back on the curve.
  await section.getByRole("button", { name: "Restore step 2" }).click();
  await expect(
    section.getByText("Restored 1 point of step 2: they are on the loss curve again."),
  ).toBeVisible();
  await expect(section.getByTestId("discarded-points-empty")).toBeVisible();
  expect(await publicSteps()).toEqual([1, 2, 3]);

  await context.close();
});
