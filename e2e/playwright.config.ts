import { defineConfig, devices } from "@playwright/test";
import { baseURL } from "./support/run-env.ts";

// The tests run against a production build of apps/web: `npm run build -w @barnraise/web` first
// (scripts/e2e.sh does both). Global setup starts a local OIDC provider and then the platform, on a
// fresh data directory and database, with the secrets of this run (support/run-env.ts).
const isCI = Boolean(process.env.CI);

export default defineConfig({
  testDir: "./tests",
  outputDir: "./test-results",
  globalSetup: "./global-setup.ts",
  retries: 0,
  // The story tests drive several pages; on a loaded 2-core machine 30 s is not always enough.
  timeout: 120_000,
  forbidOnly: isCI,
  reporter: [["list"], ["html", { outputFolder: "./playwright-report", open: "never" }]],
  use: {
    baseURL,
    trace: "retain-on-failure",
    screenshot: "only-on-failure",
  },
  projects: [
    {
      name: "chromium",
      use: {
        ...devices["Desktop Chrome"],
        launchOptions: {
          executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
          args: [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
          ],
        },
      },
    },
  ],
});
