import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { Interrupted } from "./waits.ts";

/**
 * Sets up what `npm run demo` sets up (scripts/demo.sh), in the soak's own data directory: secrets,
 * the database's migrations, the dataset shards, the seeded demo organizer, volunteer, experiment
 * and swarm tokens, and the web app's build (skipped while its sources are unchanged).
 */

export interface SoakEnvironment {
  readonly root: string;
  readonly dataDir: string;
  readonly logDir: string;
  /** The environment of the setup commands and the platform: secrets, database, data directory. */
  readonly platformEnv: Readonly<Record<string, string | undefined>>;
  /** What the swarm's processes get: the soak's environment with the tools first on PATH, no secrets. */
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
  /** DEMO_ORGANIZER_PASSWORD: the demo organizer's and volunteer's password. */
  readonly password: string;
  readonly auxToken: string;
  readonly peerToken: string;
}

/** Each step's deadline; the build gets long, as `next build` takes minutes on a small machine. */
const STEP_TIMEOUT_MS = 5 * 60_000;
const BUILD_TIMEOUT_MS = 20 * 60_000;

export async function prepareEnvironment(
  root: string,
  dataDir: string,
  logDir: string,
  say: (line: string) => void,
  signal: AbortSignal,
): Promise<SoakEnvironment> {
  const baseEnv = {
    ...process.env,
    PATH: [join(root, "node_modules/.bin"), dirname(process.execPath), process.env.PATH ?? ""].join(
      delimiter,
    ),
    NEXT_TELEMETRY_DISABLED: "1",
  };
  const secrets = generateSecrets(join(dataDir, "secrets.env"));
  const platformEnv = {
    ...baseEnv,
    ...secrets,
    BARNRAISE_DATA_DIR: dataDir,
    DATABASE_URL: `file:${join(dataDir, "barnraise.db")}`,
  };
  const setupLog = join(logDir, "setup.log");
  const step = (what: string, args: readonly string[], timeoutMs = STEP_TIMEOUT_MS) => {
    say(what);
    return runLogged(what, args, { cwd: root, env: platformEnv, logFile: setupLog, timeoutMs, signal });
  };
  const node = process.execPath;
  await step("migrating the database", [join(root, "node_modules/.bin/prisma"), "migrate", "deploy"]);
  await step("preparing the dataset shards", [
    node,
    "apps/web/src/server/datasets/prepare-datasets-command.ts",
    "--data-dir",
    dataDir,
  ]);
  const tokensFile = join(dataDir, "demo-tokens.env");
  await step("seeding the demo organizer, volunteer and experiment", [
    node,
    "scripts/seed-demo.ts",
    "--tokens-file",
    tokensFile,
  ]);
  await step(
    "building the web app (skipped while its sources are unchanged)",
    [node, "scripts/build-web.ts"],
    BUILD_TIMEOUT_MS,
  );
  const tokens = readEnvFile(tokensFile);
  const auxToken = tokens.DEMO_AUX_TOKEN;
  const peerToken = tokens.DEMO_PEER_TOKEN;
  if (auxToken === undefined || peerToken === undefined) {
    throw new Error(`${tokensFile} lacks DEMO_AUX_TOKEN or DEMO_PEER_TOKEN`);
  }
  return {
    root,
    dataDir,
    logDir,
    platformEnv,
    baseEnv,
    password: secrets.DEMO_ORGANIZER_PASSWORD,
    auxToken,
    peerToken,
  };
}

/** The demo's secrets, made as scripts/demo.sh makes them, kept in `file` (mode 600). */
function generateSecrets(file: string) {
  const random = () => randomBytes(32).toString("base64url");
  const secrets = {
    AUTH_SECRET: random(),
    BARNRAISE_SECRET: random(),
    DEMO_ORGANIZER_PASSWORD: random().slice(0, 16),
  };
  const text = Object.entries(secrets)
    .map(([key, value]) => `${key}=${value}\n`)
    .join("");
  writeFileSync(file, text, { mode: 0o600 });
  return secrets;
}

export function readEnvFile(file: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) values[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return values;
}

interface RunOptions {
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly logFile: string;
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
}

/** Runs a command with its output appended to `logFile`; rejects on failure, timeout or Ctrl-C. */
function runLogged(what: string, [command, ...args]: readonly string[], options: RunOptions): Promise<void> {
  if (command === undefined) throw new Error("no command");
  const fd = openSync(options.logFile, "a");
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["ignore", fd, fd] });
  closeSync(fd);
  return new Promise((resolve, reject) => {
    const kill = () => child.kill("SIGKILL");
    const timer = setTimeout(kill, options.timeoutMs);
    options.signal.addEventListener("abort", kill, { once: true });
    child.once("error", reject);
    child.once("exit", (code, exitSignal) => {
      clearTimeout(timer);
      options.signal.removeEventListener("abort", kill);
      if (options.signal.aborted) reject(new Interrupted());
      else if (code === 0) resolve();
      else {
        const how =
          exitSignal === null
            ? `exit code ${code}`
            : `${exitSignal} (deadline ${options.timeoutMs / 1000} s)`;
        reject(new Error(`${what} failed: ${how}; its output is in ${options.logFile}`));
      }
    });
  });
}
