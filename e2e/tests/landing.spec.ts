import { expect, test } from "@playwright/test";

test("the landing page introduces Barnraise", async ({ page }, testInfo) => {
  await page.goto("/");

  await expect(page).toHaveTitle("Barnraise");
  await expect(page.getByRole("heading", { level: 1, name: "Barnraise" })).toBeVisible();
  await expect(page.getByRole("heading", { level: 2, name: "How it works" })).toBeVisible();

  const laptop = testInfo.outputPath("landing-laptop.png");
  await page.screenshot({ path: laptop, fullPage: true });
  await testInfo.attach("landing-laptop", { path: laptop, contentType: "image/png" });

  await page.setViewportSize({ width: 390, height: 844 });
  await expect(page.getByRole("heading", { level: 1, name: "Barnraise" })).toBeInViewport();
  const phone = testInfo.outputPath("landing-phone.png");
  await page.screenshot({ path: phone, fullPage: true });
  await testInfo.attach("landing-phone", { path: phone, contentType: "image/png" });
});

test("the health endpoint reports ok and the protocol it speaks", async ({ request }) => {
  const response = await request.get("/api/v1/health");

  expect(response.status()).toBe(200);
  expect(response.headers()["content-type"]).toContain("application/json");
  expect(await response.json()).toMatchObject({
    status: "ok",
    version: expect.stringMatching(/^\d+\.\d+\.\d+/),
    protocol: { signatureDomains: expect.arrayContaining(["barnraise/request/v1", "barnraise/config/v1"]) },
  });
});
