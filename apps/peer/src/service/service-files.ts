import plist from "plist";

/**
 * The files of `barnraise-peer service install`: a systemd user unit (Linux) or a launchd agent
 * (macOS) that runs the peer in the background from login (or boot, with lingering), restarts it
 * after a crash, and logs to a file. The token is never on the command line: systemd reads it from
 * an environment file only its owner can read, launchd from the agent's own (owner-only) plist.
 */

/** What the service runs and where it writes. */
export interface ServiceSpec {
  /** The service's name: the unit's (`<name>.service`) or the agent's label suffix. */
  readonly name: string;
  /** What it says it is, e.g. "Barnraise volunteer peer for https://barnraise.example.org". */
  readonly description: string;
  /** The program and its arguments, absolute paths, without the token. */
  readonly command: readonly string[];
  /** The peer's token, for the environment (BARNRAISE_TOKEN). */
  readonly token: string;
  readonly logFile: string;
  readonly workingDirectory: string;
}

/**
 * Exit codes after which a restart cannot help (the token is bad or revoked, the volunteer is not
 * allowlisted or is banned, the answer did not verify, no place for the machine, bad usage): the
 * service stays stopped, and the log says why.
 */
export const PERMANENT_EXIT_CODES = [10, 11, 12, 13, 17, 64] as const;

/** The first systemd that knows RestartSteps= and RestartMaxDelaySec= (growing restart delays). */
export const SYSTEMD_BACKOFF_VERSION = 254;

/** Seconds before the first restart; with a systemd that grows them, the longest delay. */
export const RESTART_SECONDS = 10;
export const MAX_RESTART_SECONDS = 600;

/**
 * The systemd user unit. `systemdVersion` decides the backoff: from SYSTEMD_BACKOFF_VERSION on,
 * the delay grows from RESTART_SECONDS to MAX_RESTART_SECONDS over six restarts; before, a
 * constant RESTART_SECONDS (older versions would ignore the keys, with a warning at every load).
 * Restarts never give up (a volunteer's home link comes back), except after a permanent failure.
 */
export function systemdUnit(spec: ServiceSpec, environmentFile: string, systemdVersion: number): string {
  const backoff =
    systemdVersion >= SYSTEMD_BACKOFF_VERSION
      ? [`RestartSteps=6`, `RestartMaxDelaySec=${MAX_RESTART_SECONDS}s`]
      : [];
  return [
    "[Unit]",
    `Description=${oneLine(spec.description)}`,
    "Wants=network-online.target",
    "After=network-online.target",
    "StartLimitIntervalSec=0",
    "",
    "[Service]",
    "Type=simple",
    `ExecStart=${spec.command.map(systemdArgument).join(" ")}`,
    `EnvironmentFile=${systemdPath(environmentFile)}`,
    `WorkingDirectory=${systemdPath(spec.workingDirectory)}`,
    `StandardOutput=append:${systemdPath(spec.logFile)}`,
    `StandardError=append:${systemdPath(spec.logFile)}`,
    "Restart=on-failure",
    `RestartSec=${RESTART_SECONDS}s`,
    ...backoff,
    `RestartPreventExitStatus=${PERMANENT_EXIT_CODES.join(" ")}`,
    // SIGTERM makes the peer finish the averaging round in flight and leave.
    "KillSignal=SIGTERM",
    "TimeoutStopSec=120s",
    "Nice=10",
    "",
    "[Install]",
    "WantedBy=default.target",
    "",
  ].join("\n");
}

/** The environment file systemd reads the token from (written owner-only). */
export function systemdEnvironment(token: string): string {
  if (!/^[\x21-\x7e]+$/.test(token) || token.includes("'") || token.includes('"') || token.includes("\\")) {
    throw new RangeError("the token has characters no platform issues");
  }
  return `BARNRAISE_TOKEN=${token}\n`;
}

/** The launchd agent (~/Library/LaunchAgents/<label>.plist), written owner-only: it holds the token. */
export function launchdPlist(spec: ServiceSpec, label: string): string {
  return plist.build({
    Label: label,
    ProgramArguments: [...spec.command],
    EnvironmentVariables: { BARNRAISE_TOKEN: spec.token },
    WorkingDirectory: spec.workingDirectory,
    RunAtLoad: true,
    // Restarted after a crash, not after a clean exit (a stop, the run's end) ...
    KeepAlive: { SuccessfulExit: false },
    // ... and never sooner than this after the last start: launchd's only backoff.
    ThrottleInterval: 30,
    ProcessType: "Background",
    LowPriorityIO: true,
    Nice: 10,
    StandardOutPath: spec.logFile,
    StandardErrorPath: spec.logFile,
  });
}

/** One ExecStart argument, quoted for systemd (which also expands % and $ in it). */
export function systemdArgument(argument: string): string {
  if (argument.includes("\n") || argument.includes("\0")) {
    throw new RangeError(`an argument of the service cannot hold a line break: ${JSON.stringify(argument)}`);
  }
  const escaped = argument
    .replaceAll("\\", "\\\\")
    .replaceAll('"', '\\"')
    .replaceAll("%", "%%")
    .replaceAll("$", "$$$$");
  return `"${escaped}"`;
}

/** A path in a unit's setting (not ExecStart): % is a specifier there. */
function systemdPath(path: string): string {
  if (/[\n\0]/.test(path)) throw new RangeError(`a path of the service cannot hold a line break`);
  return path.replaceAll("%", "%%");
}

function oneLine(text: string): string {
  return text.replaceAll(/\s+/g, " ").replaceAll("%", "%%").trim();
}
