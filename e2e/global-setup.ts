import type { FullConfig } from "@playwright/test";
import { startOidcProvider } from "./support/oidc-server.ts";
import { startWebServer } from "./support/web-server.ts";

/**
 * Starts, in this order, the local OIDC provider and the platform (which knows the provider from its
 * environment), and returns the teardown that stops both. The server's output goes to
 * test-results/web-server.log.
 */
export default async function globalSetup(config: FullConfig): Promise<() => Promise<void>> {
  const oidc = await startOidcProvider();
  let web;
  try {
    web = await startWebServer(config.projects[0]?.outputDir ?? "test-results");
  } catch (error) {
    await oidc.close();
    throw error;
  }
  // The workers inherit it: a story that plays an attacker on the platform's disk needs its files.
  process.env.E2E_DATA_DIR = web.dataDir;
  return async () => {
    await web.stop();
    await oidc.close();
  };
}
