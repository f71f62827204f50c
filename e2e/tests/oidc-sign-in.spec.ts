import { expect, test, type Page, type TestInfo } from "@playwright/test";
import { e2eRun, oidcProfile } from "../support/run-env.ts";
import { screenshots } from "../support/ui.ts";

// Sign-in through a real OpenID Connect provider (oidc-provider on loopback, started by global
// setup and configured into the platform with BARNRAISE_OIDC_PROVIDERS).

const providerButton = `Sign in with ${e2eRun.oidc.name}`;

async function startProviderSignIn(page: Page, testInfo?: TestInfo): Promise<void> {
  await page.goto("/sign-in");
  if (testInfo) await screenshots(page, testInfo, "sign-in");
  await page.getByRole("button", { name: providerButton }).click();
  await page.waitForURL(
    (url) => url.origin === e2eRun.oidc.issuer && url.pathname.startsWith("/interaction/"),
  );
}

async function logInAtProvider(page: Page, login: string): Promise<void> {
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password works here");
  await page.getByRole("button", { name: "Sign-in" }).click();
  // First visit: the provider asks to share the profile with Barnraise.
  await page.getByRole("button", { name: "Continue" }).click();
}

test("a user signs in with an OIDC provider, and signing in again finds the same user", async ({
  browser,
}, testInfo) => {
  const login = `Grace Hopper ${Date.now().toString(36)}`;
  const username = oidcProfile(login).preferred_username;

  const first = await browser.newContext();
  const page = await first.newPage();
  await startProviderSignIn(page, testInfo);
  await logInAtProvider(page, login);

  await page.waitForURL(`${e2eRun.baseURL}/`);
  await expect(page.getByTestId("signed-in-username")).toHaveText(username);
  await first.close();

  // A new browser: nothing remembered at the provider or at the platform. The same provider account
  // signs in the same Barnraise user; a new user would have got a different username ("…-2").
  const second = await browser.newContext();
  const again = await second.newPage();
  await startProviderSignIn(again);
  await logInAtProvider(again, login);
  await again.waitForURL(`${e2eRun.baseURL}/`);
  await expect(again.getByTestId("signed-in-username")).toHaveText(username);

  // Signing out ends the platform's session.
  await again.getByRole("button", { name: "Sign out" }).click();
  await expect(again.getByRole("banner").getByRole("link", { name: "Sign in" })).toBeVisible();
  await expect(again.getByTestId("signed-in-username")).toHaveCount(0);
  await second.close();
});

test("cancelling at the provider brings the user back to the sign-in page with an explanation", async ({
  page,
}) => {
  await startProviderSignIn(page);
  await page.getByRole("link", { name: "[ Cancel ]" }).click();

  await page.waitForURL((url) => url.origin === e2eRun.baseURL && url.pathname === "/sign-in");
  await expect(page.getByRole("status")).toContainText("The sign-in at the provider was cancelled or failed");
  await expect(page.getByTestId("signed-in-username")).toHaveCount(0);
});
