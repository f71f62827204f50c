import type { Cast } from "./cast.ts";
import { errorLines, parseRecord, stateLoadLine, statusLine, stepLine } from "./log-records.ts";
import type {
  AuxHistory,
  ErrorLine,
  IncarnationView,
  PeerHistory,
  RevokedDrop,
  StateLoadLine,
  StatusLine,
  StepLine,
} from "./types.ts";

/** What the processes' logs say, as the checks take it: read from the log tails at the end. */

export function peerHistories(cast: Cast): PeerHistory[] {
  return cast.peers.flatMap((peer) =>
    peer.incarnations.map((incarnation) => {
      const steps: StepLine[] = [];
      const statuses: StatusLine[] = [];
      const stateLoads: StateLoadLine[] = [];
      let peerId: string | null = null;
      for (const line of incarnation.tail.lines) {
        const record = parseRecord(line.text);
        if (record === null) continue;
        if (peerId === null && typeof record.peerId === "string") peerId = record.peerId;
        const step = stepLine(record);
        if (step !== null) steps.push(step);
        const status = statusLine(record);
        if (status !== null) statuses.push(status);
        const load = stateLoadLine(record);
        if (load !== null) stateLoads.push(load);
      }
      return { incarnation: view(incarnation), peerId, steps, statuses, stateLoads };
    }),
  );
}

export function platformErrors(cast: Cast): ErrorLine[] {
  return cast.platform.incarnations.flatMap((incarnation) =>
    errorLines(incarnation.tail.lines, incarnation.logFile),
  );
}

const SPLIT_WARNING = /^the swarm has split: /;

/** The aux's "the swarm has split: …" warnings, with their times. */
export function auxSplitWarnings(cast: Cast): string[] {
  return cast.aux.incarnations.flatMap((incarnation) =>
    incarnation.tail.lines.flatMap((line) => {
      const record = parseRecord(line.text);
      const msg = record?.msg;
      if (typeof msg !== "string" || !SPLIT_WARNING.test(msg)) return [];
      const time = typeof record?.time === "number" ? new Date(record.time).toISOString() : "?";
      return [`${time} ${msg}`];
    }),
  );
}

const REVOKED_DROP = /^dropped a revoked peer/;

/** When the aux dropped which peer for its revoked token ("dropped a revoked peer: …"). */
export function auxRevokedDrops(cast: Cast): RevokedDrop[] {
  return cast.aux.incarnations.flatMap((incarnation) =>
    incarnation.tail.lines.flatMap((line) => {
      const record = parseRecord(line.text);
      if (record === null) return [];
      const { msg, time, peer } = record;
      return typeof msg === "string" &&
        REVOKED_DROP.test(msg) &&
        typeof time === "number" &&
        typeof peer === "string"
        ? [{ time, peerId: peer }]
        : [];
    }),
  );
}

/** Each aux incarnation with the times it posted a step to the platform. */
export function auxHistories(cast: Cast): AuxHistory[] {
  return cast.aux.incarnations.map((incarnation) => ({
    incarnation: view(incarnation),
    posts: incarnation.tail.lines.flatMap((line) => {
      const record = parseRecord(line.text);
      return record?.msg === "metrics posted" && typeof record.time === "number" ? [record.time] : [];
    }),
  }));
}

export function incarnationViews(cast: Cast): IncarnationView[] {
  return cast.processes.flatMap((process) => process.incarnations.map(view));
}

/** A snapshot without the live parts (the log tail, the exit promise). */
function view(incarnation: IncarnationView): IncarnationView {
  const { name, role, index, logFile, startedAt, endedAt, exit, stop, forced } = incarnation;
  return { name, role, index, logFile, startedAt, endedAt, exit, stop, forced };
}
