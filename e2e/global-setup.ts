import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FullConfig } from "@playwright/test";
import { within } from "./support/deadline.ts";
import { startMailServer, type RunningMailServer } from "./support/mail-server.ts";
import { startOidcProvider, type RunningOidcProvider } from "./support/oidc-server.ts";
import { startWebServer } from "./support/web-server.ts";

/**
 * Starts, in this order, the local OIDC provider, the SMTP server that receives alert e-mails and the
 * platform (which knows both from its environment), and returns the teardown that stops them. The
 * server's output goes to test-results/web-server.log. Each step has a deadline (support/deadline.ts):
 * a run never hangs silently before its first test or after its last.
 */
export default async function globalSetup(config: FullConfig): Promise<() => Promise<void>> {
  const oidc = await within("the OIDC provider to listen", 15_000, startOidcProvider());
  const mailDir = await mkdtemp(join(tmpdir(), "barnraise-e2e-mail-"));
  let mail;
  let web;
  try {
    mail = await within("the SMTP server to listen", 15_000, startMailServer(mailDir));
    // Migrating a fresh database, preparing shards and starting the server have deadlines of their own.
    web = await startWebServer(config.projects[0]?.outputDir ?? "test-results");
  } catch (error) {
    await closeServers(mail, mailDir, oidc);
    throw error;
  }
  // The workers inherit these: a story that plays an attacker on the platform's disk needs its files,
  // and the alerts story reads the e-mails the platform sent.
  process.env.E2E_DATA_DIR = web.dataDir;
  process.env.E2E_MAIL_DIR = mailDir;
  return async () => {
    await web.stop();
    await closeServers(mail, mailDir, oidc);
  };
}

/** Closes the SMTP server and the OIDC provider, each within 30 s (an open connection can hold a close). */
async function closeServers(
  mail: RunningMailServer | undefined,
  mailDir: string,
  oidc: RunningOidcProvider,
): Promise<void> {
  if (mail !== undefined) await within("the SMTP server to close", 30_000, mail.close());
  await rm(mailDir, { recursive: true, force: true });
  await within("the OIDC provider to close", 30_000, oidc.close());
}
