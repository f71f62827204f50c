import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { expect, test } from "@playwright/test";
import { receivedMails } from "../support/mail-server.ts";
import { baseURL } from "../support/run-env.ts";
import { register, screenshots } from "../support/ui.ts";

// Alerts in a real browser: the organizer adds a webhook that points at a receiver this test runs on
// loopback, copies its secret, sends a test and sees it delivered in the log; adds an e-mail recipient
// and sends a test e-mail through the run's SMTP server. Then a volunteer asks to join, and the
// platform's background loop delivers that alert to both, signed.

interface Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A receiver's check of a delivery's signature and time, as docs/alerts.md describes it. */
function verified(secret: string, hook: Received): boolean {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(hook.headers["barnraise-signature"] ?? ""));
  if (match === null) return false;
  const t = Number(match[1]);
  const mac = match[2] ?? "";
  const expected = createHmac("sha256", secret).update(`${t}.${hook.body}`).digest();
  return timingSafeEqual(expected, Buffer.from(mac, "hex")) && Math.abs(Date.now() / 1000 - t) <= 300;
}

test("an organizer sets up a webhook and e-mail alerts, tests them, and hears of a join request", async ({
  browser,
}, testInfo) => {
  const received: Received[] = [];
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(204);
      res.end();
    });
  });
  await new Promise<void>((resolve) => {
    receiver.listen(0, "127.0.0.1", () => {
      resolve();
    });
  });
  const hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/barnraise`;

  try {
    const suffix = Date.now().toString(36);
    const experimentId = `alerts-${suffix}`;
    const experimentName = `Alerts ${suffix}`;
    const recipient = `ops-${suffix}@example.org`;
    const organizer = await (await browser.newContext()).newPage();
    const volunteer = await (await browser.newContext()).newPage();

    await register(organizer, `alerter-${suffix}`);
    await organizer.goto("/experiments/new");
    await organizer.getByLabel("Experiment id").fill(experimentId);
    await organizer.getByLabel("Name", { exact: true }).fill(experimentName);
    await organizer.getByRole("button", { name: "Create experiment" }).click();
    await organizer.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);
    await expect(organizer.getByRole("heading", { name: "Alerts", exact: true })).toBeVisible();

    // A webhook for every event (all are ticked by default); its secret is shown once.
    await organizer.getByLabel("Webhook URL").fill(hookUrl);
    await organizer.getByRole("button", { name: "Add webhook" }).click();
    const secretRegion = organizer.getByRole("region", { name: "New webhook secret" });
    await expect(secretRegion).toBeVisible();
    const secret = ((await secretRegion.getByLabel("the webhook secret").textContent()) ?? "").trim();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    const webhooks = organizer.getByRole("list", { name: "Webhooks" });
    await expect(webhooks).toContainText(hookUrl);

    await organizer.getByRole("button", { name: `Send test to ${hookUrl}` }).click();
    await expect(organizer.getByText(`Test sent to ${hookUrl} (HTTP 204).`)).toBeVisible();
    const log = organizer.getByTestId("alert-deliveries");
    await expect(log.getByRole("row").filter({ hasText: hookUrl }).filter({ hasText: "test" })).toContainText(
      "delivered",
    );
    expect(received).toHaveLength(1);
    const [test] = received;
    expect(test && verified(secret, test)).toBe(true);
    expect(test?.headers["barnraise-event"]).toBe("test");
    expect(JSON.parse(test?.body ?? "{}")).toMatchObject({ type: "test", experiment: { id: experimentId } });

    // E-mail: a recipient, for join requests; then a test e-mail through the SMTP server.
    await organizer.getByLabel("E-mail recipients (one per line)").fill(recipient);
    const emailForm = organizer.getByRole("form", { name: "E-mail alerts" });
    await emailForm.getByRole("checkbox", { name: "A volunteer asked to join" }).check();
    await organizer.getByRole("button", { name: "Save alert settings" }).click();
    await expect(organizer.getByText("Alert settings saved.")).toBeVisible();
    await organizer.getByRole("button", { name: "Send test e-mail" }).click();
    await expect(organizer.getByText(`Test sent to ${recipient}`)).toBeVisible();
    const mailsTo = async (subject: RegExp) =>
      (await receivedMails()).filter((mail) => mail.to.includes(recipient) && subject.test(mail.subject));
    expect(await mailsTo(/Test alert/)).toEqual([
      expect.objectContaining({
        from: "alerts@barnraise.test",
        subject: `[Barnraise] Test alert for ${experimentName}: alerts reach you`,
      }),
    ]);
    await expect(log.getByRole("row").filter({ hasText: recipient })).toContainText("delivered");
    await screenshots(organizer, testInfo, "manage-alerts");

    // A volunteer asks to join: the platform's alert loop delivers it to the webhook and by e-mail.
    const volunteerName = `joiner-${suffix}`;
    await register(volunteer, volunteerName);
    await volunteer.goto(`/experiments/${experimentId}`);
    await volunteer.getByRole("button", { name: "Request to join" }).click();
    await expect(
      volunteer.getByText("Your request to join is waiting for the organizer’s approval."),
    ).toBeVisible();
    await expect
      .poll(() => received.map((hook) => hook.headers["barnraise-event"]), { timeout: 30_000 })
      .toEqual(["test", "join.requested"]);
    const joinHook = received[1];
    expect(joinHook && verified(secret, joinHook)).toBe(true);
    expect(JSON.parse(joinHook?.body ?? "{}")).toMatchObject({
      type: "join.requested",
      details: { username: volunteerName },
    });
    await expect
      .poll(async () => (await mailsTo(/asked to join/)).map((mail) => mail.subject), { timeout: 30_000 })
      .toEqual([`[Barnraise] ${volunteerName} asked to join ${experimentName}`]);
    await organizer.reload();
    await expect(log.getByRole("row").filter({ hasText: "join.requested" })).toHaveCount(2);
  } finally {
    receiver.closeAllConnections();
    await new Promise<void>((resolve) => {
      receiver.close(() => {
        resolve();
      });
    });
  }
});
