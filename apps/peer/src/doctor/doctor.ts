import { statfs } from "node:fs/promises";
import { dirname, join } from "node:path";
import { DEFAULT_MAX_SKEW_MS } from "@barnraise/protocol";
import {
  JoinError,
  JoinErrorCode,
  joinExitCode,
  joinPlatform,
  fileNodeStore,
  loadOrCreateIdentity,
  logInto,
  openNodeSession,
  type JoinedExperiment,
  type JoinedNode,
  type Swarm,
} from "@barnraise/swarm/node";
import type { Logger } from "pino";
import { type BackendChoice, describeBackend, HttpDatasetSource } from "@barnraise/models";
import { selectPeerBackend } from "@barnraise/models/node";
import { formatMbit } from "@barnraise/volunteer";
import { peerToken } from "@barnraise/swarm";
import type { MachineRules } from "../machine/machine-rules.ts";
import type { MachineSensors } from "../machine/machine-sensors.ts";
import { checkControls } from "./controls-check.ts";

/**
 * `barnraise-peer doctor`: can this machine contribute to the run? Each check says what it found, a
 * verdict (ok, warn, fail) and, when it is not ok, what to do (DESIGN §10). In order: the
 * volunteer's rules for the machine and what it tells them (when given); the platform
 * answers; the clock agrees with the platform's (passes and signed requests allow 30 s); the token
 * is valid (the same join the peer does, which trains nothing); the TF.js backend the peer would use
 * and its speed; free disk for the shard cache; whether the run's aux peers reach this machine
 * (they dial back) or it will take part through a relay; and its upload and download rate, from a
 * speed test against an aux peer. The exit code is that of the first failure, 0 when every check
 * passed or only warned.
 */

export type Verdict = "ok" | "warn" | "fail";

export interface DoctorCheck {
  readonly name: "controls" | "platform" | "clock" | "token" | "backend" | "disk" | "swarm" | "bandwidth";
  readonly verdict: Verdict;
  readonly summary: string;
  /** What to do about it, when the verdict is not ok. */
  readonly advice?: string;
}

export const DoctorExitCode = {
  ok: 0,
  badToken: 10,
  notAllowlisted: 11,
  banned: 12,
  tampered: 13,
  backendUnavailable: 14,
  platformUnreachable: 20,
  clock: 21,
  disk: 22,
  swarm: 23,
} as const;

export interface DoctorOptions {
  readonly server: URL;
  readonly token: string | undefined;
  readonly backend: BackendChoice;
  readonly dataDir: string;
  readonly identityPath: string;
  readonly client: boolean;
  readonly listen: readonly string[];
  readonly logger: Logger;
  readonly onCheck: (check: DoctorCheck) => void;
  /** The volunteer's rules for this machine and what reads it (shown first; absent: not checked). */
  readonly controls?: { readonly rules: MachineRules; readonly sensors: MachineSensors };
  /** Long work under way between checks (fetching the WebGPU binding). */
  readonly onProgress?: (line: string) => void;
  readonly signal?: AbortSignal;
  /** This machine's clock; tests move it. */
  readonly now?: () => number;
}

export interface DoctorResult {
  readonly checks: readonly DoctorCheck[];
  readonly exitCode: number;
}

/** The clock may drift this far before the doctor warns; beyond DEFAULT_MAX_SKEW_MS it fails. */
const CLOCK_WARN_MS = 5_000;
/** Room the disk needs beyond the dataset: identity, pins, logs, a checkpoint download. */
const DISK_MARGIN_BYTES = 256 * 2 ** 20;
const PLATFORM_TIMEOUT_MS = 15_000;
/** How long to wait for a connection to one of the run's aux peers. */
const SWARM_TIMEOUT_MS = 20_000;

export async function runDoctor(options: DoctorOptions): Promise<DoctorResult> {
  const now = options.now ?? Date.now;
  const checks: DoctorCheck[] = [];
  let exitCode: number = DoctorExitCode.ok;
  const report = (check: DoctorCheck, code?: number) => {
    checks.push(check);
    options.onCheck(check);
    if (check.verdict === "fail" && exitCode === DoctorExitCode.ok && code !== undefined) exitCode = code;
  };

  if (options.controls !== undefined) {
    report(await checkControls(options.controls.rules, options.controls.sensors, new Date(now())));
  }
  const platform = await checkPlatform(options, now);
  report(platform.check, DoctorExitCode.platformUnreachable);
  if (platform.time !== undefined) report(clockCheck(platform.time), DoctorExitCode.clock);
  if (platform.check.verdict === "fail") return { checks, exitCode };

  const member = await checkToken(options, now, report);
  const joined = member?.joined;

  try {
    const { selected, benchmark: bench } = await selectPeerBackend(options.backend, {
      server: options.server,
      directory: join(options.dataDir, "addons"),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.onProgress === undefined ? {} : { log: options.onProgress }),
    });
    const slow = selected.name === "cpu";
    report({
      name: "backend",
      verdict: slow ? "warn" : "ok",
      summary: describeBackend(selected, bench).replace(/^backend: /, ""),
      ...(slow
        ? {
            advice:
              "the pure-JS backend is slow; this machine still helps, but --backend wasm is far faster where it loads",
          }
        : {}),
    });
  } catch (error) {
    report(
      { name: "backend", verdict: "fail", summary: (error as Error).message.split("\n", 1)[0] ?? "" },
      DoctorExitCode.backendUnavailable,
    );
  }

  report(await diskCheck(options, joined), DoctorExitCode.disk);
  if (member !== undefined) await checkSwarm(options, member, report);
  return { checks, exitCode };
}

interface PlatformAnswer {
  readonly check: DoctorCheck;
  /** The platform's clock at the middle of the request, and this machine's at the same moment. */
  readonly time?: { readonly platform: number; readonly local: number; readonly roundTripMs: number };
}

async function checkPlatform(options: DoctorOptions, now: () => number): Promise<PlatformAnswer> {
  const url = new URL(
    "api/v1/health",
    options.server.href.endsWith("/") ? options.server : `${options.server.href}/`,
  );
  const sent = now();
  let body: { status?: unknown; version?: unknown; time?: unknown };
  try {
    const response = await fetch(url, {
      signal: AbortSignal.any([
        AbortSignal.timeout(PLATFORM_TIMEOUT_MS),
        ...(options.signal ? [options.signal] : []),
      ]),
    });
    if (!response.ok) throw new Error(`it answered ${response.status} ${response.statusText}`);
    body = (await response.json()) as typeof body;
    if (body.status !== "ok") throw new Error("its health check does not say ok");
  } catch (error) {
    const cause = (error as Error & { cause?: Error }).cause?.message;
    return {
      check: {
        name: "platform",
        verdict: "fail",
        summary: `cannot reach the platform at ${options.server.origin}: ${(error as Error).message}${cause ? ` (${cause})` : ""}`,
        advice: "check the address given with --server (open it in a browser) and this machine's network",
      },
    };
  }
  const received = now();
  const roundTripMs = received - sent;
  const check: DoctorCheck = {
    name: "platform",
    verdict: "ok",
    summary: `${options.server.origin} answers (Barnraise ${String(body.version)}, ${roundTripMs} ms round trip)`,
  };
  if (typeof body.time !== "number") return { check };
  return { check, time: { platform: body.time, local: sent + roundTripMs / 2, roundTripMs } };
}

function clockCheck(time: NonNullable<PlatformAnswer["time"]>): DoctorCheck {
  const offsetMs = time.local - time.platform;
  const seconds = (Math.abs(offsetMs) / 1000).toFixed(1);
  const direction = offsetMs >= 0 ? "ahead of" : "behind";
  const summary = `this machine's clock is ${seconds} s ${direction} the platform's (±${Math.ceil(time.roundTripMs / 2)} ms)`;
  const fix = "set the clock right: turn on time synchronisation (e.g. `sudo timedatectl set-ntp true`)";
  if (Math.abs(offsetMs) > DEFAULT_MAX_SKEW_MS) {
    return {
      name: "clock",
      verdict: "fail",
      summary,
      advice: `passes and signed requests allow ${DEFAULT_MAX_SKEW_MS / 1000} s, so the swarm would refuse this machine; ${fix}`,
    };
  }
  if (Math.abs(offsetMs) > CLOCK_WARN_MS) {
    return {
      name: "clock",
      verdict: "warn",
      summary,
      advice: `close to the ${DEFAULT_MAX_SKEW_MS / 1000} s allowed; ${fix}`,
    };
  }
  return { name: "clock", verdict: "ok", summary };
}

/** A join that went through: what the platform answered and the key it was made with. */
/** The machine as a member of the run: what the swarm check opens its node session with. */
type Member = JoinedNode;

async function checkToken(
  options: DoctorOptions,
  now: () => number,
  report: (check: DoctorCheck, code?: number) => void,
): Promise<Member | undefined> {
  if (options.token === undefined) {
    report({
      name: "token",
      verdict: "warn",
      summary: "no token given, so the token and the swarm were not checked",
      advice: "pass your peer token with --token (or BARNRAISE_TOKEN) to check them too",
    });
    return undefined;
  }
  try {
    const identity = await loadOrCreateIdentity(options.identityPath);
    const joined = await joinPlatform({
      server: options.server,
      credential: peerToken(options.token),
      keyPair: identity.keyPair,
      now,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    report({
      name: "token",
      verdict: "ok",
      summary: `valid: this machine joins "${joined.experiment.name}" as ${joined.pass.username} (pass until ${new Date(joined.passExpiresAt).toISOString()})`,
    });
    return {
      identity,
      joined,
      options: {
        server: options.server,
        credential: peerToken(options.token),
        store: fileNodeStore(options.identityPath),
        role: "trainer",
        log: logInto(options.logger),
        signal: options.signal ?? new AbortController().signal,
      },
    };
  } catch (error) {
    if (error instanceof JoinError && error.code === JoinErrorCode.EXPERIMENT_PAUSED) {
      report({
        name: "token",
        verdict: "warn",
        summary: "valid, but the organizer has paused the run",
        advice: "start the peer anyway: it waits and begins training when the run resumes",
      });
      return undefined;
    }
    const joinCode = error instanceof JoinError ? error.code : undefined;
    report(
      { name: "token", verdict: "fail", summary: (error as Error).message, advice: tokenAdvice(joinCode) },
      joinCode === undefined || joinCode === JoinErrorCode.SERVER_UNREACHABLE
        ? DoctorExitCode.platformUnreachable
        : joinExitCode(joinCode),
    );
    return undefined;
  }
}

/** What a volunteer can do about a failed join. */
function tokenAdvice(code: JoinErrorCode | undefined): string {
  switch (code) {
    case JoinErrorCode.TOKEN_INVALID:
    case JoinErrorCode.TOKEN_REVOKED:
      return "create a new token on the experiment's volunteer page and use it";
    case JoinErrorCode.NOT_ALLOWLISTED:
    case JoinErrorCode.BANNED:
      return "only the organizer can let you in: ask on the experiment's page";
    case JoinErrorCode.PASS_INVALID:
    case JoinErrorCode.CONFIG_TAMPERED:
      return "if the clock check above failed, fix the clock first; otherwise the answer was not the platform's";
    case JoinErrorCode.KEY_CONFLICT:
      return "this machine's identity belongs to another user: pass --identity with a new file";
    case JoinErrorCode.TOO_MANY_NODES:
      return "retire a machine you no longer use on the experiment's volunteer page, then try again";
    case JoinErrorCode.NODE_RETIRED:
      return "this machine was retired: pass --identity with a new file to run it again";
    default:
      return "try again later; if it persists, tell the organizer what this says";
  }
}

async function diskCheck(options: DoctorOptions, joined: JoinedExperiment | undefined): Promise<DoctorCheck> {
  let free: number;
  try {
    free = await freeBytes(options.dataDir);
  } catch (error) {
    return {
      name: "disk",
      verdict: "warn",
      summary: `cannot tell the free space for ${options.dataDir}: ${(error as Error).message}`,
    };
  }
  let needed: number | undefined;
  if (joined !== undefined) {
    try {
      const manifest = await new HttpDatasetSource({
        serverUrl: options.server.href,
        dataset: joined.config.dataset.name,
      }).manifest(options.signal);
      needed = manifest.shards.reduce((sum, shard) => sum + shard.bytes, 0);
    } catch {
      needed = undefined;
    }
  }
  const where = `${formatBytes(free)} free for the shard cache in ${options.dataDir}`;
  if (needed === undefined)
    return { name: "disk", verdict: free > DISK_MARGIN_BYTES ? "ok" : "warn", summary: where };
  const summary = `${where}; the dataset needs ${formatBytes(needed)}`;
  if (free < needed + DISK_MARGIN_BYTES) {
    return {
      name: "disk",
      verdict: "fail",
      summary,
      advice: "free some space, or pass --data-dir with a directory on a larger disk",
    };
  }
  return { name: "disk", verdict: "ok", summary };
}

/** Free bytes on the file system that holds `path`, or would once it is created. */
async function freeBytes(path: string): Promise<number> {
  for (let candidate = path; ; candidate = dirname(candidate)) {
    try {
      const stats = await statfs(candidate);
      return stats.bavail * stats.bsize;
    } catch (error) {
      const missing = (error as NodeJS.ErrnoException).code === "ENOENT";
      if (!missing || dirname(candidate) === candidate) throw error;
    }
  }
}

async function checkSwarm(
  options: DoctorOptions,
  member: Member,
  report: (check: DoctorCheck, code?: number) => void,
): Promise<void> {
  const { joined } = member;
  if (joined.initialPeers.length === 0) {
    report({
      name: "swarm",
      verdict: "warn",
      summary: "the run has no aux peer online, so nothing could dial this machine back",
      advice:
        "the peer can start: it trains on its own until the organizer's aux peer or other volunteers come",
    });
    return;
  }
  // The node's own session, for the minute the checks take (its pass outlives them).
  const session = await openNodeSession(member, {
    mode: options.client ? "client" : "node",
    listen: options.listen,
    peers: [],
    logger: options.logger,
    swarm: () => ({ getState: () => null, loadCheckpoint: () => Promise.resolve(null) }),
  });
  const { swarm } = session;
  try {
    const aux = await waitForAux(swarm, options.signal);
    if (aux === undefined) {
      report(
        {
          name: "swarm",
          verdict: "fail",
          summary: `could not connect to any of the run's aux peers in ${SWARM_TIMEOUT_MS / 1000} s (${joined.initialPeers.join(", ")})`,
          advice:
            "this machine must be allowed to open outgoing TCP connections to them: check a firewall or proxy",
        },
        DoctorExitCode.swarm,
      );
      return;
    }
    if (options.client) {
      report({
        name: "swarm",
        verdict: "ok",
        summary: `connected to aux peer ${aux}; --client: taking part through its relay, without reducing a part`,
      });
    } else {
      const reach = await swarm.node.checkReachability();
      if (reach?.reachable === true) {
        report({
          name: "swarm",
          verdict: "ok",
          summary: `reachable at ${reach.address} (an aux peer dialed back): this machine takes part as a full node`,
        });
      } else {
        report({
          name: "swarm",
          verdict: "warn",
          summary: `not reachable from outside (${reach?.reachable === false ? reach.reason : "no answer"}): this machine takes part through an aux peer's relay, sending and receiving gradients without reducing a part`,
          advice:
            "to be a full node, forward a TCP port to this machine and pass --listen /ip4/0.0.0.0/tcp/<port>",
        });
      }
    }
    try {
      const link = await swarm.measureLink(aux, options.signal);
      report({
        name: "bandwidth",
        verdict: "ok",
        summary: `upload ${formatMbit(link.uploadBytesPerSecond)}, download ${formatMbit(link.downloadBytesPerSecond)} (speed test against aux peer ${aux})`,
      });
    } catch (error) {
      report({
        name: "bandwidth",
        verdict: "warn",
        summary: `the speed test against aux peer ${aux} failed: ${(error as Error).message}`,
        advice: "the peer measures its link from its own traffic once it trains",
      });
    }
  } finally {
    await session.close();
  }
}

async function waitForAux(swarm: Swarm, signal: AbortSignal | undefined): Promise<string | undefined> {
  const deadline = Date.now() + SWARM_TIMEOUT_MS;
  while (Date.now() < deadline && signal?.aborted !== true) {
    const aux = swarm.node.members().find((peer) => swarm.node.modeOf(peer) === "aux");
    if (aux !== undefined) return aux;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return undefined;
}

function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value >= 10 || unit === 0 ? value.toFixed(0) : value.toFixed(1)} ${units[unit] ?? "B"}`;
}
