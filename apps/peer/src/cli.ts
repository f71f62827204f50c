#!/usr/bin/env node
import { homedir } from "node:os";
import { realpathSync } from "node:fs";
import { join } from "node:path";
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import {
  JoinExitCode,
  joinExitCode,
  readPlatformTarget,
  IdentityFileError,
  PrivateFileError,
  JoinError,
  JoinErrorCode,
  nodeCli,
  parseMetricsPort,
  processIo,
  type CommandIo,
} from "@barnraise/swarm/node";
import * as tf from "@tensorflow/tfjs-core";
import { pino } from "pino";
import {
  type BackendChoice,
  BackendUnavailableError,
  isDatasetError,
  isModelError,
  ModelErrorCode,
  parseBackendChoice,
} from "@barnraise/models";
import { DoctorExitCode, runDoctor } from "./doctor/doctor.ts";
import {
  describeRules,
  machineRuleOptions,
  readMachineRules,
  threadEnvironment,
  type MachineRules,
} from "./machine/machine-rules.ts";
import { linuxSensors } from "./machine/machine-sensors.ts";
import { MachineWatch } from "./machine/machine-watch.ts";
import { runPeer } from "./run-peer.ts";
import { serviceCommand } from "./service/service-command.ts";
import { type Reporter, TrainingAbortedError, VolunteerControls } from "@barnraise/volunteer";
import { createReporter, parseLogLevel } from "./ui/create-reporter.ts";
import { peerToken, RateCap, type TrafficCaps } from "@barnraise/swarm";

const program = "barnraise-peer";
const home = join(homedir(), ".barnraise", "peer");
const defaultIdentityPath = join(home, "identity.json");
const defaultDataDir = join(home, "data");

/** The options the peer and `doctor` share: the platform, the token, and how this machine takes part. */
const machineOptions = {
  server: { type: "string" },
  token: { type: "string" },
  backend: { type: "string", default: "auto" },
  "data-dir": { type: "string", default: defaultDataDir },
  identity: { type: "string", default: defaultIdentityPath },
  client: { type: "boolean", default: false },
  listen: { type: "string", multiple: true, default: [] as string[] },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const satisfies ParseArgsOptionsConfig;

/**
 * Exit codes, one per failure a volunteer can act on. 0 also covers a clean Ctrl-C; a second
 * Ctrl-C exits with 130 like any interrupted program.
 */
export const PeerExitCode = {
  ...JoinExitCode,
  backendUnavailable: 14,
  dataset: 15,
  /** The experiment's uploaded model could not be downloaded, or cannot be trained. */
  model: 16,
  interrupted: 130,
} as const;

const usage = `Usage: ${program} --server URL --token TOKEN [options]
       ${program} doctor --server URL [--token TOKEN] [options]
       ${program} identity [--identity FILE]
       ${program} service install|status|uninstall [options]   (in the background; service --help)

Joins a Barnraise experiment with your peer token and trains it together with the other volunteers.

Options:
  --server URL          the platform, e.g. https://barnraise.example.org  (or BARNRAISE_SERVER)
  --token TOKEN         your peer token, shown once on the experiment's page  (or BARNRAISE_TOKEN,
                        which keeps it out of the process list)
  --backend NAME        auto (default), gpu, webgpu, node, wasm or cpu
  --batch-size N|auto   per-step minibatch on this machine (default: the experiment's setting)
  --data-dir DIR        where verified dataset shards, uploaded models and a fetched WebGPU
                        binding are kept (default: ${defaultDataDir})
  --identity FILE       this node's key (default: ${defaultIdentityPath})
  --client              behind NAT: only dial out, never accept connections
  --listen MULTIADDR    listen address (repeatable; default: TCP on a free port)
  --peer MULTIADDR      also join through this peer (repeatable)
  --json                JSON log lines on stdout, even on a terminal
  --log-level LEVEL     debug, info (default), warn or error
  --metrics-port N      serve Prometheus metrics at http://127.0.0.1:N/metrics (0: a free port,
                        logged); see the project's docs/metrics.md
  --metrics-host HOST   the address the metrics listen on (default 127.0.0.1, this machine only)

Your machine, your rules (each off unless set; also as keys of a JSON file, see the README):
  --config FILE         read these rules from FILE (flags win over it)
  --max-use PERCENT     compute at most this share of the time, e.g. 50% (default 100%)
  --idle-minutes N      train only after N minutes without keyboard or mouse input
  --busy-above PERCENT  pause while other programs use more than this share of the CPU
  --pause-on-battery    pause while the machine runs on battery
  --schedule WINDOWS    train only then, e.g. "mon-fri 18:00-08:00; sat,sun 00:00-24:00"
  --gpu-max-temp C      pause above C °C on the GPU (nvidia-smi), resume 8 °C below
  --gpu-resume-temp C   resume below C °C instead
  --threads N           compute on at most N threads (native TensorFlow; wasm and cpu use one)
  --max-upload RATE     send at most this much, e.g. 2Mbit or 250kB/s (averaging, state, speed tests)
  --max-download RATE   receive at most this much, e.g. 10Mbit
  -h, --help            show this help

doctor checks whether this machine can contribute, each check with a verdict and what to do: your
rules for the machine and what it tells them, the platform answers, the clock agrees with it, the
token is valid, the backend and its speed, free disk, whether the swarm can reach this machine,
and its upload and download rate. It exits 0 when
the machine can contribute; otherwise 10-13 (token), 14 (backend), 20 (platform unreachable),
21 (clock), 22 (disk) or 23 (cannot connect to the swarm).

Ctrl-C finishes the averaging round in flight and leaves the swarm; press it twice to quit at once.

Exit codes: 0 done or stopped, 1 failure, 10 bad or revoked token, 11 not on the allowlist,
12 banned, 13 pass, config or model failed verification, 14 backend unavailable, 15 dataset
unusable, 16 model unavailable or untrainable, 17 no place for this machine (the token runs as many
as the organizer allows, or it was retired), 64 bad usage, 130 interrupted.`;

export interface PeerCliEnvironment {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly io: CommandIo;
  /** Where the reporter writes; process streams in production. */
  readonly stdout: NodeJS.WritableStream & { isTTY?: boolean };
  readonly stderr: NodeJS.WritableStream & { isTTY?: boolean };
  /** Graceful and hard stop; wired to SIGINT/SIGTERM by the entry point. */
  readonly stopSignal: AbortSignal;
  readonly abortSignal: AbortSignal;
  readonly startedAt?: number;
  /** The running program's entry (for `service install`); default: this process's, links resolved. */
  readonly programPath?: string;
}

/** `barnraise-peer` without the process: parses `argv`, runs the peer, returns the exit code. */
export async function main(argv: readonly string[], environment: PeerCliEnvironment): Promise<number> {
  const { io, env } = environment;
  if (argv[0] === "identity") {
    return nodeCli({ program, defaultIdentityPath })(argv, io);
  }
  if (argv[0] === "doctor") return doctor(argv.slice(1), environment);
  if (argv[0] === "service") {
    return serviceCommand(argv.slice(1), {
      io,
      env,
      platform: process.platform,
      nodePath: process.execPath,
      programPath: environment.programPath ?? realpathSync(process.argv[1] ?? "cli.js"),
      runOptions,
      pathOptions: ["config", "identity", "data-dir"],
      checkRun: async (args, serviceEnv) => {
        await parseRun(args, serviceEnv);
      },
    });
  }
  let run: Awaited<ReturnType<typeof parseRun>>;
  try {
    run = await parseRun(argv, env);
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  if (run === "help") {
    io.out(usage);
    return PeerExitCode.ok;
  }
  const { values, server, token, backend, batchSize, logLevel, metricsPort, rules } = run;

  // Production mode: no debug checks, and no "install tfjs-node" banner from the pure-JS backend
  // (the start-up report already says which backend runs and why the faster ones did not load).
  tf.enableProdMode();
  const reporter = createReporter({
    stdout: environment.stdout,
    stderr: environment.stderr,
    json: values.json,
    logLevel,
  });
  const onStop = () => {
    reporter.log(
      "info",
      "stopping (an averaging round in flight is finished first); press Ctrl-C again to quit now",
    );
  };
  environment.stopSignal.addEventListener("abort", onStop, { once: true });
  // The volunteer's rules for this machine: threads (before a native backend loads), the use
  // limit, and the reasons to pause.
  if (rules.threads !== undefined) Object.assign(process.env, threadEnvironment(rules.threads));
  const controls = new VolunteerControls({ dutyCycle: rules.maxUse });
  const watch = new MachineWatch({
    rules,
    sensors: linuxSensors(),
    controls,
    log: (level, message, fields) => {
      reporter.log(level, message, fields);
    },
  });
  reporter.log("info", `controls: ${describeRules(rules).join("; ")}`);
  watch.start();
  try {
    const result = await runPeer({
      server,
      credential: peerToken(token),
      identityPath: values.identity,
      dataDir: values["data-dir"],
      backend,
      batchSize,
      mode: values.client ? "client" : "node",
      listen: values.listen,
      peers: values.peer,
      reporter,
      stopSignal: environment.stopSignal,
      abortSignal: environment.abortSignal,
      controls,
      ...trafficCaps(rules),
      ...(metricsPort === undefined ? {} : { metrics: { port: metricsPort, host: values["metrics-host"] } }),
      ...(environment.startedAt === undefined ? {} : { startedAt: environment.startedAt }),
    });
    reporter.log("info", "goodbye", {
      step: result.train.step,
      samplesContributed: result.train.samplesContributed,
    });
    return PeerExitCode.ok;
  } catch (error) {
    return reportFailure(reporter, error, environment);
  } finally {
    watch.stop();
    environment.stopSignal.removeEventListener("abort", onStop);
    reporter.close();
  }
}

/** The volunteer's upload and download caps, as the swarm takes them (none when unset). */
function trafficCaps(rules: MachineRules): { caps?: TrafficCaps } {
  const { maxUploadBytesPerSecond: upload, maxDownloadBytesPerSecond: download } = rules;
  if (upload === undefined && download === undefined) return {};
  return {
    caps: {
      ...(upload === undefined ? {} : { upload: new RateCap(upload) }),
      ...(download === undefined ? {} : { download: new RateCap(download) }),
    },
  };
}

/** The peer's options: how this machine takes part, its logging and metrics, and its rules. */
const runOptions = {
  ...machineOptions,
  "batch-size": { type: "string" },
  peer: { type: "string", multiple: true, default: [] as string[] },
  "log-level": { type: "string", default: "info" },
  "metrics-port": { type: "string" },
  "metrics-host": { type: "string", default: "127.0.0.1" },
  ...machineRuleOptions,
} as const satisfies ParseArgsOptionsConfig;

/** The peer's arguments, checked ("help" for --help); throws what is wrong with them. */
async function parseRun(argv: readonly string[], env: Readonly<Record<string, string | undefined>>) {
  const { values } = parseArgs({ args: [...argv], allowPositionals: false, options: runOptions });
  if (values.help) return "help" as const;
  const { server, token } = readPlatformTarget(values, env);
  return {
    values,
    server,
    token,
    backend: parseBackendChoice(values.backend),
    batchSize: parseBatchSize(values["batch-size"]),
    logLevel: parseLogLevel(values["log-level"]),
    metricsPort: parseMetricsPort(values["metrics-port"]),
    rules: await readMachineRules(values),
  };
}

/** `barnraise-peer doctor`: runs the checks and prints each verdict (JSON lines with --json). */
async function doctor(argv: readonly string[], environment: PeerCliEnvironment): Promise<number> {
  const { io, env } = environment;
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      allowPositionals: false,
      options: { ...machineOptions, ...machineRuleOptions },
    }));
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  if (values.help) {
    io.out(usage);
    return PeerExitCode.ok;
  }
  let server: URL;
  let backend: BackendChoice;
  let rules: MachineRules;
  try {
    server = readPlatformTarget(
      { server: values.server, token: "-" },
      { BARNRAISE_SERVER: env.BARNRAISE_SERVER },
    ).server;
    backend = parseBackendChoice(values.backend);
    rules = await readMachineRules(values);
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  const token = values.token ?? (env.BARNRAISE_TOKEN === "" ? undefined : env.BARNRAISE_TOKEN);
  // The backend check measures what the peer would run: with its thread cap.
  if (rules.threads !== undefined) Object.assign(process.env, threadEnvironment(rules.threads));
  tf.enableProdMode();
  const marks = { ok: "✓", warn: "!", fail: "✗" } as const;
  if (!values.json) io.out(`Checking whether this machine can contribute to Barnraise at ${server.origin}…`);
  const result = await runDoctor({
    server,
    token,
    backend,
    dataDir: values["data-dir"],
    identityPath: values.identity,
    client: values.client,
    listen: values.listen,
    controls: { rules, sensors: linuxSensors() },
    // The swarm's own logs would drown the verdicts: only its errors.
    logger: pino({ name: program, level: "error" }, pino.destination({ fd: 2, sync: true })),
    signal: AbortSignal.any([environment.stopSignal, environment.abortSignal]),
    onProgress: (line) => {
      io.out(values.json ? JSON.stringify({ msg: line }) : `    ${" ".repeat(9)} … ${line}`);
    },
    onCheck: (check) => {
      if (values.json) {
        io.out(JSON.stringify({ msg: "doctor check", ...check }));
        return;
      }
      io.out(`  ${marks[check.verdict]} ${check.name.padEnd(9)} ${check.summary}`);
      if (check.advice !== undefined) io.out(`    ${" ".repeat(9)} → ${check.advice}`);
    },
  });
  if (values.json) {
    io.out(JSON.stringify({ msg: "doctor done", exitCode: result.exitCode }));
  } else if (result.exitCode === DoctorExitCode.ok) {
    io.out("This machine can contribute: start it with the same command without `doctor`.");
  } else {
    io.out(`This machine cannot contribute yet: fix what is marked ✗ above (exit code ${result.exitCode}).`);
  }
  return result.exitCode;
}

function parseBatchSize(text: string | undefined): number | "auto" | undefined {
  if (text === undefined) return undefined;
  if (text.trim().toLowerCase() === "auto") return "auto";
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > 65_536) {
    throw new RangeError(
      `--batch-size must be "auto" or an integer from 1 to 65536, got ${JSON.stringify(text)}`,
    );
  }
  return value;
}

function usageError(io: CommandIo, message: string): number {
  io.err(`error: ${message}`);
  io.err(`Run ${program} --help for the options.`);
  return PeerExitCode.usage;
}

/** Says what went wrong in the volunteer's terms and picks the exit code. */
export function reportFailure(
  reporter: Reporter,
  error: unknown,
  signals: Pick<PeerCliEnvironment, "stopSignal" | "abortSignal">,
): number {
  // A stop before training began cancels the start-up (join retries, downloads) mid-way.
  if (signals.abortSignal.aborted || signals.stopSignal.aborted || error instanceof TrainingAbortedError) {
    reporter.log("warn", "interrupted before the peer could finish starting or stopping");
    return PeerExitCode.interrupted;
  }
  if (error instanceof JoinError) {
    if (error.code === JoinErrorCode.ABORTED) {
      reporter.log("warn", "interrupted while joining");
      return PeerExitCode.interrupted;
    }
    reporter.log("error", error.message, { code: error.code });
    return joinExitCode(error.code);
  }
  if (error instanceof BackendUnavailableError) {
    reporter.log("error", error.message, { code: error.code });
    return PeerExitCode.backendUnavailable;
  }
  if (isDatasetError(error)) {
    reporter.log("error", error.message, { code: error.code });
    return PeerExitCode.dataset;
  }
  if (
    isModelError(error, ModelErrorCode.MODEL_TAMPERED) ||
    isModelError(error, ModelErrorCode.MODEL_UNAVAILABLE) ||
    isModelError(error, ModelErrorCode.MODEL_INVALID)
  ) {
    reporter.log("error", error.message, { code: error.code });
    // Other bytes than the signed ones are the same failure as a tampered config: the answer was not the platform's.
    return error.code === ModelErrorCode.MODEL_TAMPERED ? PeerExitCode.tampered : PeerExitCode.model;
  }
  if (error instanceof IdentityFileError || error instanceof PrivateFileError) {
    // The identity or the authority pin next to it: the message says how to repair the file.
    reporter.log("error", error.message, { code: "LOCAL_FILE" });
    return PeerExitCode.failure;
  }
  reporter.log("error", `the peer failed: ${(error as Error).message}`, { code: "INTERNAL", err: error });
  return PeerExitCode.failure;
}

/** The first SIGINT/SIGTERM stops gracefully, the second aborts, a third exits at once. */
function processSignals(): { stop: AbortController; abort: AbortController } {
  const stop = new AbortController();
  const abort = new AbortController();
  let received = 0;
  const onSignal = () => {
    received += 1;
    if (received === 1) stop.abort();
    else if (received === 2) abort.abort();
    else process.exit(PeerExitCode.interrupted);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return { stop, abort };
}

if (import.meta.main) {
  const startedAt = Date.now();
  const { stop, abort } = processSignals();
  const code = await main(process.argv.slice(2), {
    env: process.env,
    io: processIo,
    stdout: process.stdout,
    stderr: process.stderr,
    stopSignal: stop.signal,
    abortSignal: abort.signal,
    startedAt,
  });
  // libp2p and TF.js may keep handles open after a clean shutdown; the run is over either way.
  process.exit(code);
}
