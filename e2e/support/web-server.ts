import { spawn, execFile, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { note, within } from "./deadline.ts";
import { e2eRun } from "./run-env.ts";

/**
 * The platform under test: the production build of apps/web (`next start`) on a fresh data
 * directory with a SQLite database migrated by `prisma migrate deploy`, a quick subset of the MNIST
 * shards that peers download, the run's secrets, the local OIDC provider configured as a sign-in
 * option, and the run's SMTP server (support/mail-server.ts) for alert e-mails. Access passes live
 * for a minute (the platform's shortest), so a peer hears of a ban at its next refresh, within a minute.
 */

/** MNIST samples to shard: enough for a few steps of a small run, prepared in about a second. */
const MNIST_LIMIT = 3000;
const PASS_TTL_SECONDS = 60;
/** Deadlines of the steps that start and stop a platform: none of them may hang a run silently. */
const MIGRATE_WITHIN_MS = 60_000;
const PREPARE_DATASETS_WITHIN_MS = 120_000;
const UP_WITHIN_MS = 60_000;
const STOP_GRACE_MS = 10_000;
const KILL_GRACE_MS = 5_000;

const run = promisify(execFile);
const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
const webDir = join(repoRoot, "apps/web");
const requireFromWeb = createRequire(join(webDir, "package.json"));
const requireFromRoot = createRequire(join(repoRoot, "package.json"));

export interface RunningWebServer {
  /** Where it answers, e.g. `http://localhost:3100`. */
  readonly baseURL: string;
  readonly dataDir: string;
  readonly logFile: string;
  /** Stops the server (SIGTERM to its process group); the data directory stays. */
  stop(): Promise<void>;
  /** Kills the server and anything it started with SIGKILL, as a power cut would; the data directory stays. */
  kill(): Promise<void>;
}

export interface WebServerOptions {
  readonly port: number;
  /** Its output is appended here. */
  readonly logFile: string;
  /**
   * The data directory of an earlier server to start again on (its database, shards and
   * checkpoints); a fresh one, migrated and with MNIST shards, when absent.
   */
  readonly dataDir?: string;
  /** The database (e.g. a PostgreSQL URL, migrated when the data directory is fresh); the data directory's SQLite file when absent. */
  readonly databaseUrl?: string;
  /** The origin users reach it at, when that is not its own port (a reverse proxy in front). */
  readonly publicUrl?: string;
  /** More environment for the server (and for preparing a fresh data directory's datasets). */
  readonly env?: Readonly<Record<string, string>>;
}

/** The platform of the end-to-end run, at E2E_PORT; stopping it also removes its data. */
export async function startWebServer(logDir: string): Promise<RunningWebServer> {
  await mkdir(logDir, { recursive: true });
  const server = await launchWebServer({ port: e2eRun.webPort, logFile: join(logDir, "web-server.log") });
  return {
    ...server,
    stop: async () => {
      await server.stop();
      await rm(server.dataDir, { recursive: true, force: true });
    },
  };
}

/** A platform on `port`, on a fresh data directory or on an earlier server's. */
export async function launchWebServer(options: WebServerOptions): Promise<RunningWebServer> {
  const baseURL = `http://localhost:${options.port}`;
  const { oidc } = e2eRun;
  if (await isUp(baseURL)) {
    throw new Error(`something already answers at ${baseURL}; stop it or set E2E_PORT to a free port`);
  }

  const dataDir = options.dataDir ?? (await prepareDataDir(options.databaseUrl, options.env));
  const databaseUrl = options.databaseUrl ?? sqliteUrl(dataDir);
  const publicUrl = options.publicUrl ?? baseURL;
  const { logFile } = options;
  const log = createWriteStream(logFile, { flags: "a" });
  const nextCli = requireFromWeb.resolve("next/dist/bin/next");
  const child = spawn(process.execPath, [nextCli, "start", "--port", String(options.port)], {
    cwd: webDir,
    // Its own process group, so stopping it also stops anything it started.
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      NODE_ENV: "production",
      NEXT_TELEMETRY_DISABLED: "1",
      AUTH_SECRET: e2eRun.authSecret,
      AUTH_URL: publicUrl,
      BARNRAISE_SECRET: e2eRun.barnraiseSecret,
      BARNRAISE_DATA_DIR: dataDir,
      BARNRAISE_PUBLIC_URL: publicUrl,
      BARNRAISE_SIGNUP: "open",
      // Every spec registers its own users from this one address.
      BARNRAISE_SIGNUP_LIMIT: "100",
      BARNRAISE_PASS_TTL_SECONDS: String(PASS_TTL_SECONDS),
      DATABASE_URL: databaseUrl,
      BARNRAISE_OIDC_PROVIDERS: JSON.stringify([
        {
          id: oidc.id,
          name: oidc.name,
          issuer: oidc.issuer,
          clientId: oidc.clientId,
          clientSecret: oidc.clientSecret,
        },
      ]),
      BARNRAISE_SMTP_URL: e2eRun.smtp.url,
      BARNRAISE_MAIL_FROM: e2eRun.smtp.from,
      // The alert stories' webhook receivers run on this machine, as a receiver on the platform's own
      // network would.
      BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES: "allow",
      LOG_LEVEL: "info",
      ...options.env,
    },
  });
  child.stdout.pipe(log, { end: false });
  child.stderr.pipe(log, { end: false });
  const exited = new Promise<void>((resolve) =>
    child.once("exit", () => {
      resolve();
    }),
  );
  const running = () => child.exitCode === null && child.signalCode === null && child.pid !== undefined;
  const toGroup = (name: NodeJS.Signals) => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, name);
    } catch {
      // The group is gone already.
    }
  };
  // SIGTERM waits for the server to exit, but not forever: what is still there gets SIGKILL.
  const signal = async (name: NodeJS.Signals) => {
    if (running()) {
      toGroup(name);
      const what = `the web server on port ${options.port} to exit after ${name}`;
      try {
        await within(what, name === "SIGKILL" ? KILL_GRACE_MS : STOP_GRACE_MS, exited);
      } catch {
        if (name !== "SIGKILL") {
          note(
            `the web server on port ${options.port} still runs ${STOP_GRACE_MS / 1000} s after ${name}: SIGKILL`,
          );
          toGroup("SIGKILL");
          await within(`${what} and SIGKILL`, KILL_GRACE_MS, exited).catch((error: unknown) => {
            note(`${String(error)}; its log: ${logFile}`);
          });
        } else {
          note(`the web server on port ${options.port} did not exit on SIGKILL; its log: ${logFile}`);
        }
      }
    }
    log.end();
  };
  const stop = () => signal("SIGTERM");
  const kill = () => signal("SIGKILL");

  try {
    await waitUntilUp(baseURL, child);
  } catch (error) {
    await stop();
    if (options.dataDir === undefined) await rm(dataDir, { recursive: true, force: true });
    const output = await readFile(logFile, "utf8").catch(() => "");
    throw new Error(`${(error as Error).message}\n--- web server output ---\n${output.slice(-4000)}`, {
      cause: error,
    });
  }
  return { baseURL, dataDir, logFile, stop, kill };
}

function sqliteUrl(dataDir: string): string {
  return `file:${join(dataDir, "barnraise.db")}`;
}

/**
 * A fresh data directory with a migrated database (`databaseUrl`, else a SQLite file in it) and a
 * quick subset of the MNIST shards, in the storage `env` names (the data directory without one).
 */
async function prepareDataDir(
  databaseUrl?: string,
  env: Readonly<Record<string, string>> = {},
): Promise<string> {
  const dataDir = await mkdtemp(join(tmpdir(), "barnraise-e2e-"));
  try {
    const prismaCli = requireFromRoot.resolve("prisma/build/index.js");
    await runStep("prisma migrate deploy", MIGRATE_WITHIN_MS, [prismaCli, "migrate", "deploy"], {
      cwd: repoRoot,
      env: { ...process.env, DATABASE_URL: databaseUrl ?? sqliteUrl(dataDir) },
    });
    await runStep(
      "preparing the MNIST shards",
      PREPARE_DATASETS_WITHIN_MS,
      [
        join(webDir, "src/server/datasets/prepare-datasets-command.ts"),
        "--dataset",
        "mnist",
        "--data-dir",
        dataDir,
        "--limit",
        String(MNIST_LIMIT),
      ],
      { cwd: repoRoot, env: { ...process.env, ...env } },
    );
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  return dataDir;
}

/** A Node.js script of the repository, killed and reported when it runs past `withinMs`. */
async function runStep(
  what: string,
  withinMs: number,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<void> {
  try {
    await run(process.execPath, [...args], { ...options, timeout: withinMs, killSignal: "SIGKILL" });
  } catch (error) {
    const killed = (error as { killed?: boolean }).killed === true;
    throw new Error(
      killed ? `${what} did not finish within ${withinMs / 1000} s, so it was killed` : `${what} failed`,
      { cause: error },
    );
  }
}

async function waitUntilUp(baseURL: string, child: ChildProcess) {
  const started = Date.now();
  let noteAt = started + 10_000;
  for (;;) {
    if (await isUp(baseURL)) return;
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `the web server exited (${String(child.exitCode ?? child.signalCode)}) before it was up`,
      );
    }
    const waited = Date.now() - started;
    if (waited > UP_WITHIN_MS) {
      throw new Error(
        `the web server did not answer ${baseURL}/api/v1/health within ${UP_WITHIN_MS / 1000} s`,
      );
    }
    if (Date.now() >= noteAt) {
      note(
        `still waiting for the web server to answer ${baseURL}/api/v1/health (${Math.round(waited / 1000)} s of ${UP_WITHIN_MS / 1000} s)`,
      );
      noteAt += 10_000;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function isUp(baseURL: string): Promise<boolean> {
  try {
    const response = await fetch(`${baseURL}/api/v1/health`, { signal: AbortSignal.timeout(2000) });
    return response.ok;
  } catch {
    return false;
  }
}
