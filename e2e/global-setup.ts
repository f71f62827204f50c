import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FullConfig } from "@playwright/test";
import { startMailServer } from "./support/mail-server.ts";
import { startOidcProvider } from "./support/oidc-server.ts";
import { startWebServer } from "./support/web-server.ts";

/**
 * Starts, in this order, the local OIDC provider, the SMTP server that receives alert e-mails and the
 * platform (which knows both from its environment), and returns the teardown that stops them. The
 * server's output goes to test-results/web-server.log.
 */
export default async function globalSetup(config: FullConfig): Promise<() => Promise<void>> {
  const oidc = await startOidcProvider();
  const mailDir = await mkdtemp(join(tmpdir(), "barnraise-e2e-mail-"));
  let mail;
  let web;
  try {
    mail = await startMailServer(mailDir);
    web = await startWebServer(config.projects[0]?.outputDir ?? "test-results");
  } catch (error) {
    await mail?.close();
    await rm(mailDir, { recursive: true, force: true });
    await oidc.close();
    throw error;
  }
  // The workers inherit these: a story that plays an attacker on the platform's disk needs its files,
  // and the alerts story reads the e-mails the platform sent.
  process.env.E2E_DATA_DIR = web.dataDir;
  process.env.E2E_MAIL_DIR = mailDir;
  return async () => {
    await web.stop();
    await mail.close();
    await rm(mailDir, { recursive: true, force: true });
    await oidc.close();
  };
}
