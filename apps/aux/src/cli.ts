#!/usr/bin/env node
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import {
  JoinExitCode,
  joinExitCode,
  readPlatformTarget,
  IdentityFileError,
  JoinError,
  JoinErrorCode,
  nodeCli,
  parseMetricsPort,
  PrivateFileError,
  processIo,
  type CommandIo,
} from "@barnraise/swarm/node";
import { pino, type Logger } from "pino";
import { runAux } from "./run-aux.ts";

const program = "barnraise-aux";
const defaultIdentityPath = join(homedir(), ".barnraise", "aux", "identity.json");
/** A fixed port, so that the address registered with the platform survives a restart. */
export const DEFAULT_LISTEN = [
  "/ip4/0.0.0.0/tcp/31337",
  "/ip4/0.0.0.0/tcp/31338/ws",
  "/ip4/0.0.0.0/udp/31339/webrtc-direct",
];

/** Exit codes: the peer's, where the same failure can happen. */
export const AuxExitCode = JoinExitCode;

const usage = `Usage: ${program} --server URL --token AUX_TOKEN [options]
       ${program} identity [--identity FILE]

The organizer's helper node for an experiment: a stable bootstrap and relay for the swarm, the
monitor that posts each step's loss and throughput to the platform, the checkpointer that uploads
the model every few steps and scores each checkpoint on the dataset's test split, and a reducer
that helps average. Run it on a machine with a public address (a small CPU server is enough).

Options:
  --server URL          the platform  (or BARNRAISE_SERVER)
  --token TOKEN         an aux token from the experiment's manage page  (or BARNRAISE_TOKEN)
  --listen MULTIADDR    listen address (repeatable; default: ${DEFAULT_LISTEN.join(" and ")})
  --announce MULTIADDR  address to register and announce instead, e.g. a public IP (repeatable)
  --peer MULTIADDR      also connect to this peer (repeatable)
  --identity FILE       this node's key (default: ${defaultIdentityPath})
  --data-dir DIR        staging for checkpoint files, and the test split and model the held-out
                        evaluation reads (default: the identity's directory)
  --no-averaging        do not help average (bootstrap, relay, monitor and checkpoints only)
  --no-evaluate         do not score each checkpoint on the dataset's test split (the run's
                        public page then charts no held-out accuracy, perplexity or error)
  --no-validate         do not validate what trainers contribute to the rounds this aux helps
                        (each sampled contribution is scored by the change of held-out loss it
                        causes; peers whose contributions hurt are flagged on the manage page)
  --json                JSON log lines on stdout (always; accepted for symmetry with the peer)
  --log-level LEVEL     debug, info (default), warn or error
  --metrics-port N      serve Prometheus metrics at http://127.0.0.1:N/metrics (0: a free port,
                        logged); see the project's docs/metrics.md
  --metrics-host HOST   the address the metrics listen on (default 127.0.0.1, this machine only)
  -h, --help            show this help

Logs are JSON lines on stdout. Ctrl-C leaves the swarm and exits.

Exit codes: 0 stopped, 1 failure, 10 bad, revoked or volunteer token, 11 not the organizer,
12 banned, 13 pass or config failed verification, 64 bad usage.`;

export interface AuxCliEnvironment {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly io: CommandIo;
  /** Where the JSON logs go. */
  readonly logDestination: pino.DestinationStream;
  readonly stopSignal: AbortSignal;
}

/** `barnraise-aux` without the process: parses `argv`, runs the aux, returns the exit code. */
export async function main(argv: readonly string[], environment: AuxCliEnvironment): Promise<number> {
  const { io, env } = environment;
  if (argv[0] === "identity") return nodeCli({ program, defaultIdentityPath })(argv, io);
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      allowPositionals: false,
      options: {
        server: { type: "string" },
        token: { type: "string" },
        listen: { type: "string", multiple: true, default: [] },
        announce: { type: "string", multiple: true, default: [] },
        peer: { type: "string", multiple: true, default: [] },
        identity: { type: "string", default: defaultIdentityPath },
        "data-dir": { type: "string" },
        "no-averaging": { type: "boolean", default: false },
        "no-evaluate": { type: "boolean", default: false },
        "no-validate": { type: "boolean", default: false },
        json: { type: "boolean", default: true },
        "log-level": { type: "string", default: "info" },
        "metrics-port": { type: "string" },
        "metrics-host": { type: "string", default: "127.0.0.1" },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  if (values.help) {
    io.out(usage);
    return AuxExitCode.ok;
  }
  let server: URL;
  let token: string;
  try {
    ({ server, token } = readPlatformTarget(values, env));
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  const level = values["log-level"].trim().toLowerCase();
  if (!["debug", "info", "warn", "error"].includes(level)) {
    return usageError(io, `unknown log level ${JSON.stringify(values["log-level"])}`);
  }
  let metricsPort: number | undefined;
  try {
    metricsPort = parseMetricsPort(values["metrics-port"]);
  } catch (error) {
    return usageError(io, (error as Error).message);
  }
  for (const address of [...values.listen, ...values.announce, ...values.peer]) {
    if (!address.startsWith("/")) return usageError(io, `${JSON.stringify(address)} is not a multiaddr`);
  }

  const logger = pino({ name: program, level }, environment.logDestination);
  try {
    await runAux({
      server,
      token: token.trim(),
      identityPath: values.identity,
      dataDir: values["data-dir"] ?? dirname(values.identity),
      listen: values.listen.length > 0 ? values.listen : DEFAULT_LISTEN,
      announce: values.announce,
      peers: values.peer,
      helpAveraging: !values["no-averaging"],
      evaluate: !values["no-evaluate"],
      validate: !values["no-validate"],
      logger,
      stopSignal: environment.stopSignal,
      ...(metricsPort === undefined ? {} : { metrics: { port: metricsPort, host: values["metrics-host"] } }),
    });
    return AuxExitCode.ok;
  } catch (error) {
    return reportFailure(logger, error, environment.stopSignal);
  }
}

function usageError(io: CommandIo, message: string): number {
  io.err(`error: ${message}`);
  io.err(`Run ${program} --help for the options.`);
  return AuxExitCode.usage;
}

function reportFailure(logger: Logger, error: unknown, stopSignal: AbortSignal): number {
  if (error instanceof JoinError) {
    if (error.code === JoinErrorCode.ABORTED || stopSignal.aborted) {
      logger.warn("interrupted while joining");
      return AuxExitCode.ok;
    }
    logger.error({ code: error.code }, error.message);
    return joinExitCode(error.code);
  }
  if (error instanceof IdentityFileError || error instanceof PrivateFileError) {
    logger.error({ code: "LOCAL_FILE" }, error.message);
    return AuxExitCode.failure;
  }
  logger.error({ code: "INTERNAL", err: error }, `the aux peer failed: ${(error as Error).message}`);
  return AuxExitCode.failure;
}

if (import.meta.main) {
  const stop = new AbortController();
  let received = 0;
  const onSignal = () => {
    received += 1;
    if (received === 1) stop.abort();
    else process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  const code = await main(process.argv.slice(2), {
    env: process.env,
    io: processIo,
    logDestination: pino.destination({ fd: 1, sync: true }),
    stopSignal: stop.signal,
  });
  // libp2p may keep handles open after a clean shutdown; the run is over either way.
  process.exit(code);
}
