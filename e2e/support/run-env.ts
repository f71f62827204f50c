import { createHash, randomUUID } from "node:crypto";

/**
 * Everything one end-to-end run shares between Playwright's runner (which starts the servers in global
 * setup) and its workers (which run the tests): ports, URLs and secrets. All of it derives from
 * E2E_RUN_ID, set once per run (scripts/e2e.sh, or the config when it is missing), so the runner and
 * every worker compute the same values, and each run gets secrets of its own.
 */

process.env.E2E_RUN_ID ??= randomUUID();
const runId = process.env.E2E_RUN_ID;

function derived(purpose: string): string {
  return createHash("sha256").update(`barnraise-e2e/${runId}/${purpose}`).digest("base64url");
}

function port(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1 || value > 65_535) throw new Error(`${name} must be a TCP port`);
  return value;
}

// localhost everywhere, never 127.0.0.1: Next rewrites one into the other, and an OIDC code exchange
// that mixes them fails.
const webPort = port("E2E_PORT", 3100);
const oidcPort = port("E2E_OIDC_PORT", webPort + 1);
/** For a story that runs a platform of its own (to kill and start it again). */
const sparePort = port("E2E_SPARE_PORT", webPort + 2);
/** The SMTP server that receives the platform's alert e-mails (support/mail-server.ts). */
const smtpPort = port("E2E_SMTP_PORT", webPort + 3);
/** The demo lifecycle stories run `npm run demo` on this port and the next, one each. */
const demoPort = port("E2E_DEMO_PORT", webPort + 4);
export const baseURL = `http://localhost:${webPort}`;

export const e2eRun = {
  runId,
  webPort,
  baseURL,
  sparePort,
  demoPort,
  smtp: {
    port: smtpPort,
    url: `smtp://127.0.0.1:${smtpPort}`,
    from: "Barnraise e2e <alerts@barnraise.test>",
  },
  authSecret: derived("auth-secret"),
  barnraiseSecret: derived("barnraise-secret"),
  oidc: {
    port: oidcPort,
    issuer: `http://localhost:${oidcPort}`,
    /** The provider id in BARNRAISE_OIDC_PROVIDERS, hence the callback path /api/auth/callback/<id>. */
    id: "local-oidc",
    /** The label of the sign-in button: "Sign in with <name>". */
    name: "Local OIDC",
    clientId: "barnraise-e2e",
    clientSecret: derived("oidc-client-secret"),
    cookieKey: derived("oidc-cookie-key"),
  },
} as const;

/**
 * The profile the local OIDC provider returns for a login typed into its development sign-in form:
 * a preferred_username that differs from the login, so a test can tell which one the platform used.
 */
export function oidcProfile(login: string): { preferred_username: string; name: string; email: string } {
  const username = login
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, ".");
  return { preferred_username: username, name: login, email: `${username}@oidc.example` };
}
