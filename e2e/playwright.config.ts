import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { defineConfig, devices } from "@playwright/test";

// The tests run against a production build of apps/web: `npm run build -w @barnraise/web` first
// (scripts/e2e.sh does both).
const port = Number(process.env.E2E_PORT ?? "3100");
const baseURL = `http://localhost:${port}`;
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const isCI = Boolean(process.env.CI);

export default defineConfig({
  testDir: "./tests",
  outputDir: "./test-results",
  retries: 0,
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
  webServer: {
    command: "npm run start -w @barnraise/web",
    cwd: repoRoot,
    env: {
      PORT: String(port),
      NEXT_TELEMETRY_DISABLED: "1",
      AUTH_SECRET: randomBytes(32).toString("base64"),
      BARNRAISE_SECRET: randomBytes(32).toString("base64"),
    },
    url: `${baseURL}/api/v1/health`,
    reuseExistingServer: !isCI,
    timeout: 60_000,
    stdout: "ignore",
    stderr: "pipe",
  },
});
