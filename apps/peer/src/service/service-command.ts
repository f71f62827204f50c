import { execFile } from "node:child_process";
import { chmod, copyFile, mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { ExitCode, type CommandIo } from "@barnraise/swarm/node";
import {
  launchdPlist,
  MAX_RESTART_SECONDS,
  RESTART_SECONDS,
  SYSTEMD_BACKOFF_VERSION,
  systemdEnvironment,
  systemdUnit,
  type ServiceSpec,
} from "./service-files.ts";

/**
 * `barnraise-peer service install|uninstall|status`: the peer as a per-user background service
 * that starts at login (at boot with lingering), restarts after a crash with backoff, keeps the
 * token out of the process list and logs to a file it names. A systemd user unit on Linux, a
 * launchd agent on macOS; Windows is refused with what to do instead.
 */

/** What the command needs from the program around it; tests replace the system commands. */
export interface ServiceEnvironment {
  readonly io: CommandIo;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly platform: NodeJS.Platform;
  /** Node.js itself, absolute (process.execPath). */
  readonly nodePath: string;
  /** The running program's entry, absolute and with links resolved. */
  readonly programPath: string;
  /** The peer's own options (the run's), for `install`'s arguments. */
  readonly runOptions: ParseArgsOptionsConfig;
  /** Options whose value is a path: made absolute, since the service runs elsewhere. */
  readonly pathOptions: readonly string[];
  /** Checks `install`'s peer arguments as the peer would (a RangeError says what is wrong). */
  readonly checkRun: (
    argv: readonly string[],
    env: Readonly<Record<string, string | undefined>>,
  ) => Promise<void>;
  /** Runs a system command (systemctl, loginctl, launchctl); default: execFile with `env`. */
  readonly exec?: (command: string, args: readonly string[]) => Promise<ExecResult>;
}

export interface ExecResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

const DEFAULT_NAME = "barnraise-peer";
const serviceOptions = {
  name: { type: "string", default: DEFAULT_NAME },
  "no-start": { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const satisfies ParseArgsOptionsConfig;

export const serviceUsage = `Usage:
  barnraise-peer service install --server URL --token TOKEN [peer options] [--name NAME] [--no-start]
  barnraise-peer service status [--name NAME]
  barnraise-peer service uninstall [--name NAME]

install runs the peer in the background from now on: a systemd user unit on Linux, a launchd agent
on macOS (Windows: not yet). It takes the same options as the peer (your rules for the machine
included), keeps the token out of the process list (in a file only you can read), logs to a file
it names, starts at login, and restarts after a crash, waiting longer after each one (not after a
refusal such as a revoked token: the log says why). --name installs more than one (one per
experiment); --no-start enables it for the next login without starting it now.`;

/** Runs `barnraise-peer service …` (`argv` after "service"); returns the exit code. */
export async function serviceCommand(
  argv: readonly string[],
  environment: ServiceEnvironment,
): Promise<number> {
  const { io } = environment;
  const [action, ...rest] = argv;
  if (action === undefined || action === "--help" || action === "-h") {
    io.out(serviceUsage);
    return action === undefined ? ExitCode.usage : ExitCode.ok;
  }
  if (action !== "install" && action !== "uninstall" && action !== "status") {
    return usage(io, `unknown service command ${JSON.stringify(action)}: install, status or uninstall`);
  }
  if (environment.platform === "win32") {
    io.err(
      'error: barnraise-peer service is not available on Windows yet. Keep the peer running in a terminal, or start it at log on from Task Scheduler (trigger "At log on", action: the same npx command).',
    );
    return ExitCode.usage;
  }
  if (environment.platform !== "linux" && environment.platform !== "darwin") {
    io.err(
      `error: barnraise-peer service knows systemd (Linux) and launchd (macOS), not ${environment.platform}`,
    );
    return ExitCode.usage;
  }
  const layout = serviceLayout(environment);
  let parsed;
  try {
    parsed = parseArgs({
      args: [...rest],
      allowPositionals: false,
      tokens: true,
      options: action === "install" ? { ...environment.runOptions, ...serviceOptions } : serviceOptions,
    });
  } catch (error) {
    return usage(io, (error as Error).message);
  }
  const values = parsed.values as { name?: string; "no-start"?: boolean; help?: boolean; token?: string };
  if (values.help === true) {
    io.out(serviceUsage);
    return ExitCode.ok;
  }
  const name = values.name ?? DEFAULT_NAME;
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(name)) {
    return usage(io, `--name must be 1 to 64 letters, digits, '.', '_' or '-', got ${JSON.stringify(name)}`);
  }
  const files = layout(name);
  try {
    if (action === "status") return await status(environment, files);
    if (action === "uninstall") return await uninstall(environment, files);
    const args = peerArguments(parsed.tokens, environment);
    const token = values.token ?? environment.env.BARNRAISE_TOKEN;
    try {
      await environment.checkRun(args, {
        ...environment.env,
        ...(token === undefined ? {} : { BARNRAISE_TOKEN: token }),
      });
      if (token === undefined || token.trim() === "") throw new RangeError("--token is required");
      systemdEnvironment(token);
    } catch (error) {
      return usage(io, (error as Error).message);
    }
    return await install(environment, files, { args, token, start: values["no-start"] !== true });
  } catch (error) {
    io.err(`error: ${(error as Error).message}`);
    return ExitCode.failure;
  }
}

/** Where a service's files go on this system. */
interface ServiceFiles {
  readonly name: string;
  readonly kind: "systemd" | "launchd";
  /** The unit or agent file. */
  readonly definition: string;
  /** systemd: the token's environment file; launchd keeps it in the definition. */
  readonly environmentFile?: string;
  readonly logFile: string;
  /** The copy of the program the service runs (so that clearing npx's cache does not break it). */
  readonly programDirectory: string;
  readonly home: string;
}

function serviceLayout(environment: ServiceEnvironment): (name: string) => ServiceFiles {
  const { env } = environment;
  const home = env.HOME !== undefined && isAbsolute(env.HOME) ? env.HOME : homedir();
  const xdg = (variable: string, fallback: string) => {
    const value = env[variable];
    return value !== undefined && isAbsolute(value) ? value : join(home, fallback);
  };
  if (environment.platform === "darwin") {
    return (name) => ({
      name,
      kind: "launchd",
      definition: join(home, "Library", "LaunchAgents", `${launchdLabel(name)}.plist`),
      logFile: join(home, "Library", "Logs", "Barnraise", `${name}.log`),
      programDirectory: join(home, "Library", "Application Support", "Barnraise", name),
      home,
    });
  }
  const config = xdg("XDG_CONFIG_HOME", ".config");
  return (name) => ({
    name,
    kind: "systemd",
    definition: join(config, "systemd", "user", `${name}.service`),
    environmentFile: join(config, "barnraise", `${name}.env`),
    logFile: join(xdg("XDG_STATE_HOME", join(".local", "state")), "barnraise", `${name}.log`),
    programDirectory: join(xdg("XDG_DATA_HOME", join(".local", "share")), "barnraise", name),
    home,
  });
}

function launchdLabel(name: string): string {
  return `org.barnraise.${name}`;
}

/**
 * The peer's arguments for the service: those given to `install` less the token (it goes into the
 * service's environment) and the service's own options, with paths made absolute.
 */
function peerArguments(
  tokens: NonNullable<ReturnType<typeof parseArgs>["tokens"]>,
  environment: ServiceEnvironment,
): string[] {
  const args: string[] = [];
  const own = new Set(["token", ...Object.keys(serviceOptions)]);
  for (const token of tokens) {
    if (token.kind !== "option" || own.has(token.name)) continue;
    if (token.value === undefined) {
      args.push(`--${token.name}`);
      continue;
    }
    const value = environment.pathOptions.includes(token.name) ? resolve(token.value) : token.value;
    args.push(`--${token.name}=${value}`);
  }
  return args;
}

async function install(
  environment: ServiceEnvironment,
  files: ServiceFiles,
  run: { readonly args: readonly string[]; readonly token: string; readonly start: boolean },
): Promise<number> {
  const { io } = environment;
  const program = await stableProgram(environment, files);
  const server = run.args.find((arg) => arg.startsWith("--server="))?.slice("--server=".length);
  const spec: ServiceSpec = {
    name: files.name,
    description: `Barnraise volunteer peer${server === undefined ? "" : ` for ${server}`}`,
    command: [environment.nodePath, program, ...run.args],
    token: run.token,
    logFile: files.logFile,
    workingDirectory: files.home,
  };
  await mkdir(dirname(files.logFile), { recursive: true });
  await mkdir(dirname(files.definition), { recursive: true });
  if (files.kind === "launchd") {
    await writePrivate(files.definition, launchdPlist(spec, launchdLabel(files.name)));
    const domain = `gui/${String(process.getuid?.() ?? 0)}`;
    // A new definition replaces the loaded one: out with the old, in with the new.
    await exec(environment, "launchctl", ["bootout", `${domain}/${launchdLabel(files.name)}`]);
    const bootstrap = ["bootstrap", domain, files.definition];
    if (run.start) await mustExec(environment, "launchctl", bootstrap, `launchctl ${bootstrap.join(" ")}`);
    io.out(`Installed ${files.definition} (launchd agent ${launchdLabel(files.name)}).`);
    io.out(run.start ? "It runs now, and at every login." : "It runs from the next login.");
    io.out(`Log: ${files.logFile}   (follow it with: tail -f "${files.logFile}")`);
    io.out(`After a crash launchd starts it again, at most once every 30 s.`);
    return ExitCode.ok;
  }
  const environmentFile = files.environmentFile ?? `${files.definition}.env`;
  await mkdir(dirname(environmentFile), { recursive: true });
  await writePrivate(environmentFile, systemdEnvironment(run.token));
  const version = await systemdVersion(environment);
  await writeFile(files.definition, systemdUnit(spec, environmentFile, version), { mode: 0o644 });
  const unit = `${files.name}.service`;
  const enable = ["--user", "enable", ...(run.start ? ["--now"] : []), unit];
  const then = `systemctl --user daemon-reload && systemctl ${enable.join(" ")}`;
  await mustExec(environment, "systemctl", ["--user", "daemon-reload"], then);
  await mustExec(environment, "systemctl", enable, then);
  io.out(
    `Installed ${files.definition} (systemd user unit ${unit}); the token is in ${environmentFile}, readable by you only.`,
  );
  io.out(run.start ? "It runs now, and at every login." : "It runs from the next login.");
  io.out(`Log: ${files.logFile}   (follow it with: tail -f "${files.logFile}")`);
  io.out(
    version >= SYSTEMD_BACKOFF_VERSION
      ? `After a crash it restarts, ${RESTART_SECONDS} s later at first and up to ${MAX_RESTART_SECONDS / 60} min later after repeated crashes.`
      : `After a crash it restarts ${RESTART_SECONDS} s later (systemd ${version} has no growing delays).`,
  );
  const user = environment.env.USER ?? environment.env.LOGNAME;
  const linger =
    user === undefined
      ? undefined
      : await exec(environment, "loginctl", ["show-user", user, "--property=Linger", "--value"]);
  if (linger?.code !== 0 || linger.stdout.trim() !== "yes") {
    io.out(
      `To start it at boot, before you log in, run: loginctl enable-linger${user === undefined ? "" : ` ${user}`}`,
    );
  }
  return ExitCode.ok;
}

async function uninstall(environment: ServiceEnvironment, files: ServiceFiles): Promise<number> {
  const { io } = environment;
  if (!(await exists(files.definition))) {
    io.out(`No service ${files.name} is installed (${files.definition} does not exist).`);
    return ExitCode.ok;
  }
  if (files.kind === "launchd") {
    await exec(environment, "launchctl", [
      "bootout",
      `gui/${String(process.getuid?.() ?? 0)}/${launchdLabel(files.name)}`,
    ]);
  } else {
    // Stopping lets the peer finish its averaging round in flight (SIGTERM, see the unit).
    await exec(environment, "systemctl", ["--user", "disable", "--now", `${files.name}.service`]);
  }
  await rm(files.definition, { force: true });
  if (files.environmentFile !== undefined) await rm(files.environmentFile, { force: true });
  await rm(files.programDirectory, { recursive: true, force: true });
  if (files.kind === "systemd") await exec(environment, "systemctl", ["--user", "daemon-reload"]);
  io.out(`Stopped and removed the service ${files.name}. Its log stays in ${files.logFile}.`);
  return ExitCode.ok;
}

async function status(environment: ServiceEnvironment, files: ServiceFiles): Promise<number> {
  const { io } = environment;
  if (!(await exists(files.definition))) {
    io.out(`No service ${files.name} is installed here (install it with: barnraise-peer service install …).`);
    return ExitCode.failure;
  }
  io.out(`Service ${files.name}: ${files.definition}`);
  if (files.kind === "systemd") {
    const unit = `${files.name}.service`;
    const enabled = await exec(environment, "systemctl", ["--user", "is-enabled", unit]);
    const active = await exec(environment, "systemctl", ["--user", "is-active", unit]);
    io.out(`  enabled: ${answer(enabled)}`);
    io.out(`  running: ${answer(active)}`);
  } else {
    const shown = await exec(environment, "launchctl", [
      "print",
      `gui/${String(process.getuid?.() ?? 0)}/${launchdLabel(files.name)}`,
    ]);
    const state = /^\s*state = (.+)$/m.exec(shown.stdout)?.[1];
    io.out(`  running: ${shown.code === 0 ? (state ?? "loaded") : "not loaded"}`);
  }
  io.out(`  log:     ${files.logFile}`);
  const last = await lastLine(files.logFile);
  if (last !== undefined) io.out(`  last:    ${last}`);
  return ExitCode.ok;
}

/**
 * The program the service runs: the published one (a directory holding `cli.js`, its package.json
 * and binaries) is copied beside the service's files, so that clearing npx's cache does not break
 * it; a checkout runs from where it is.
 */
async function stableProgram(environment: ServiceEnvironment, files: ServiceFiles): Promise<string> {
  const directory = dirname(environment.programPath);
  const manifest = await readFile(join(directory, "package.json"), "utf8").catch(() => undefined);
  const name = manifest === undefined ? undefined : (JSON.parse(manifest) as { name?: unknown }).name;
  if (name !== "barnraise-peer") return environment.programPath;
  await rm(files.programDirectory, { recursive: true, force: true });
  await mkdir(files.programDirectory, { recursive: true });
  for (const entry of await readdir(directory, { withFileTypes: true })) {
    if (entry.isFile()) await copyFile(join(directory, entry.name), join(files.programDirectory, entry.name));
  }
  return join(files.programDirectory, basename(environment.programPath));
}

/** systemd's major version (`systemctl --version`); 0 when it does not say. */
async function systemdVersion(environment: ServiceEnvironment): Promise<number> {
  const result = await exec(environment, "systemctl", ["--version"]);
  return Number(/systemd (\d+)/.exec(result.stdout)?.[1] ?? 0);
}

async function writePrivate(path: string, text: string): Promise<void> {
  await writeFile(path, text, { mode: 0o600 });
  // An existing file keeps its mode on write: make sure.
  await chmod(path, 0o600);
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function lastLine(path: string): Promise<string | undefined> {
  const text = await readFile(path, "utf8").catch(() => "");
  const lines = text.trimEnd().split("\n");
  const last = lines.at(-1);
  return last === undefined || last === "" ? undefined : last.slice(0, 300);
}

function answer(result: ExecResult): string {
  return (result.stdout.trim() || result.stderr.trim() || `exit ${result.code}`).split("\n")[0] ?? "";
}

function exec(
  environment: ServiceEnvironment,
  command: string,
  args: readonly string[],
): Promise<ExecResult> {
  if (environment.exec !== undefined) return environment.exec(command, args);
  return new Promise((done) => {
    execFile(
      command,
      [...args],
      { env: { ...environment.env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : 127;
        done({ code, stdout, stderr: error !== null && stderr === "" ? error.message : stderr });
      },
    );
  });
}

/** Runs a command that must succeed; otherwise throws what it said, and `then`, what to run once it works. */
async function mustExec(
  environment: ServiceEnvironment,
  command: string,
  args: readonly string[],
  then: string,
): Promise<void> {
  const result = await exec(environment, command, args);
  if (result.code === 0) return;
  throw new Error(
    `${command} ${args.join(" ")} failed (${answer(result)}). The service's files are written: once ${command} works in this session (it needs your own login session, not su, sudo or a container), run: ${then}`,
  );
}

function usage(io: CommandIo, message: string): number {
  io.err(`error: ${message}`);
  io.err("Run barnraise-peer service --help for the options.");
  return ExitCode.usage;
}
