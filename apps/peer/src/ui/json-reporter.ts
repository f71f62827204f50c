/**
 * Structured logs for a peer that runs unattended (a service, a container, a pipe): one pino JSON
 * record per line, the peer's own messages, the swarm engine's and a periodic status record in the
 * same stream, so one log collector sees everything (DESIGN §1).
 */
import { pino, type Level } from "pino";
import type { PeerNetwork, PeerPhase, PeerStatus, Reporter } from "@barnraise/volunteer";

/**
 * Where the JSON lines go. It is written synchronously: for a process's stdout pass
 * `pino.destination({ fd: 1, sync: true })`, so the last records are not lost when the peer exits.
 */
export interface LogDestination {
  write(line: string): unknown;
}

export interface JsonReporterOptions {
  readonly destination: LogDestination;
  /** Records below this level are dropped (default "info"). The status record is at info. */
  readonly level?: Level;
  /** Minimum time between two status records; a phase change writes one at once. */
  readonly statusIntervalMs?: number;
  readonly now?: () => number;
}

/** A PeerStatus as a JSON-safe record: a non-finite number is null, a missing loss too. */
export interface StatusRecord {
  readonly phase: PeerPhase;
  readonly step: number | null;
  readonly globalSamples: number | null;
  readonly targetBatchSize: number | null;
  readonly etaSeconds: number | null;
  readonly localSamplesPerSecond: number | null;
  readonly samplesContributed: number | null;
  readonly peersOnline: number | null;
  readonly loss: number | null;
  /** Mode and members by path (direct, relayed, upgraded); null where unknown. */
  readonly network: PeerNetwork | null;
  /** What keeps the peer from the swarm ("refused by the swarm: …"), or null when nothing does. */
  readonly swarmNote: string | null;
  /** The volunteer's rules that hold training (`PauseReason`s); empty when none does. */
  readonly pauseReasons: readonly string[];
}

export function createJsonReporter(options: JsonReporterOptions): Reporter {
  const now = options.now ?? Date.now;
  const statusIntervalMs = options.statusIntervalMs ?? 10_000;
  let closed = false;
  let lastPhase: PeerPhase | undefined;
  let lastNote: string | null = null;
  let lastStatusAt = -Infinity;

  // The swarm engine may hold child loggers: closing must silence them too, so the gate is here
  // and not on the logger's level (a child keeps the level it was created with).
  const logger = pino(
    { level: options.level ?? "info", timestamp: () => `,"time":${now()}` },
    {
      write: (line: string) => {
        if (!closed) options.destination.write(line);
      },
    },
  );

  return {
    logger,
    status(status) {
      if (closed) return;
      const time = now();
      // A new note (refused, cut off, back) or pause reason is written at once, like a new phase.
      const note = `${status.swarmNote ?? ""}|${(status.pauseReasons ?? []).join(",")}`;
      if (status.phase === lastPhase && note === lastNote && time - lastStatusAt < statusIntervalMs) return;
      lastPhase = status.phase;
      lastNote = note;
      lastStatusAt = time;
      logger.info(statusRecord(status), "status");
    },
    log(level, message, fields = {}) {
      if (closed) return;
      logger[level](fields, message);
    },
    close() {
      closed = true;
    },
  };
}

/** Field by field, so nothing but the contract's fields reaches the log. */
export function statusRecord(status: PeerStatus): StatusRecord {
  return {
    phase: status.phase,
    step: finiteOrNull(status.step),
    globalSamples: finiteOrNull(status.globalSamples),
    targetBatchSize: finiteOrNull(status.targetBatchSize),
    etaSeconds: finiteOrNull(status.etaSeconds),
    localSamplesPerSecond: finiteOrNull(status.localSamplesPerSecond),
    samplesContributed: finiteOrNull(status.samplesContributed),
    peersOnline: finiteOrNull(status.peersOnline),
    loss: status.loss === undefined ? null : finiteOrNull(status.loss),
    network:
      status.network === undefined
        ? null
        : {
            mode: status.network.mode,
            direct: status.network.direct,
            relayed: status.network.relayed,
            upgraded: status.network.upgraded,
          },
    swarmNote: status.swarmNote ?? null,
    pauseReasons: status.pauseReasons ?? [],
  };
}

function finiteOrNull(value: number): number | null {
  return Number.isFinite(value) ? value : null;
}
