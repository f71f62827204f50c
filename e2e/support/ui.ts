import { expect, type Page, type TestInfo } from "@playwright/test";

/** Steps the end-to-end stories share: registering, signing in, and screenshots at two sizes. */

export const PASSWORD = "correct horse battery staple";

/** Creates an account through the registration form; the page ends signed in as `username`. */
export async function register(page: Page, username: string, password = PASSWORD): Promise<void> {
  await page.goto("/register");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password", { exact: true }).fill(password);
  await page.getByLabel("Repeat the password").fill(password);
  await page.getByRole("button", { name: "Create account" }).click();
  await expect(page.getByTestId("signed-in-username")).toHaveText(username);
}

/** Signs in through the sign-in form (from `path`, which sends the user back there). */
export async function signIn(page: Page, username: string, password = PASSWORD): Promise<void> {
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
}

export async function signOut(page: Page): Promise<void> {
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page.getByRole("banner").getByRole("link", { name: "Sign in" })).toBeVisible();
}

const sizes = {
  laptop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
} as const;

/** Full-page screenshots of the current page at laptop and phone sizes, attached to the test's report. */
export async function screenshots(page: Page, testInfo: TestInfo, name: string): Promise<void> {
  const original = page.viewportSize();
  for (const [size, viewport] of Object.entries(sizes)) {
    await page.setViewportSize(viewport);
    const path = testInfo.outputPath(`${name}-${size}.png`);
    await page.screenshot({ path, fullPage: true, animations: "disabled" });
    await testInfo.attach(`${name}-${size}`, { path, contentType: "image/png" });
  }
  if (original) await page.setViewportSize(original);
}
