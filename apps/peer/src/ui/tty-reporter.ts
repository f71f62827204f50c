/**
 * The live terminal display: one status line at the bottom, redrawn in place, with log lines printed
 * above it. A volunteer reads this while training runs (DESIGN §1), so it is plain text, not JSON, and
 * it never lets the status line wrap: a wrapped line cannot be redrawn in place.
 */
import { pino } from "pino";
import {
  PAUSE_REASON_TEXT,
  type PeerNetwork,
  type PeerPhase,
  type PeerStatus,
  type Reporter,
} from "@barnraise/volunteer";

/** How much of the swarm engine's own logging a volunteer asks to see. */
export type LogThreshold = "debug" | "info" | "warn" | "error";

/** The slice of a terminal stream the display writes to. */
export interface TerminalStream {
  write(text: string): boolean;
  /** Width in characters; read at every redraw, so a resized terminal is followed. */
  readonly columns?: number | undefined;
}

export interface TtyReporterOptions {
  readonly stream: TerminalStream;
  readonly now?: () => number;
  /** Minimum time between two redraws of the status line; a phase change redraws at once. */
  readonly minIntervalMs?: number;
  /** Swarm engine records below this level are dropped (default "warn": the engine is chatty). */
  readonly level?: LogThreshold;
}

/** Back to the first column, then erase the whole line. */
const CLEAR_LINE = "\r\x1b[2K";
const DEFAULT_COLUMNS = 80;
const BAR_CELLS = 10;
const SEPARATOR = " · ";

const PHASE_LABELS: Readonly<Record<PeerPhase, string>> = {
  starting: "starting…",
  joining: "joining…",
  "loading-state": "loading state…",
  training: "training",
  averaging: "averaging…",
  paused: "paused by the organizer",
  "cut-off": "cut off from the swarm, not training",
  stopping: "stopping…",
};

export function createTtyReporter(options: TtyReporterOptions): Reporter {
  const { stream } = options;
  const now = options.now ?? Date.now;
  const minIntervalMs = options.minIntervalMs ?? 200;
  let latest: PeerStatus | undefined;
  /** What the bottom line shows now; "" when nothing is drawn. */
  let drawn = "";
  let lastDrawAt = -Infinity;
  let closed = false;

  function statusLine(): string {
    if (latest === undefined) return "";
    // One column spare: some terminals wrap as soon as the last column is written.
    return formatStatusLine(latest, (stream.columns ?? DEFAULT_COLUMNS) - 1);
  }

  function redraw(): void {
    drawn = statusLine();
    lastDrawAt = now();
    stream.write(CLEAR_LINE + drawn);
  }

  /** Replaces the status line with `line`, then draws the status again below it, in one write. */
  function printAbove(line: string): void {
    if (closed) return;
    const status = statusLine();
    stream.write(`${drawn === "" ? "" : CLEAR_LINE}${line}\n${status}`);
    drawn = status;
  }

  const logger = pino(
    // No pid/hostname: the volunteer knows which machine this is. The clock is the injected one.
    { level: options.level ?? "warn", base: null, timestamp: () => `,"time":${now()}` },
    {
      write: (record: string) => {
        printAbove(formatRecord(record, now));
      },
    },
  );

  return {
    logger,
    status(status) {
      if (closed) return;
      const phaseChanged = latest?.phase !== status.phase;
      latest = status;
      if (phaseChanged || now() - lastDrawAt >= minIntervalMs) redraw();
    },
    log(level, message, fields = {}) {
      printAbove(formatLogLine(now(), level, message, fields));
    },
    close() {
      if (closed) return;
      closed = true;
      if (drawn !== "") stream.write(CLEAR_LINE);
      drawn = "";
    },
  };
}

/** One piece of the status line; the least important go first when the terminal is narrow. */
interface Segment {
  readonly text: string;
  /** Lower is more important. */
  readonly rank: number;
  /** What joins it to the segment before. */
  readonly glue: string;
}

/**
 * `step 12 ▕██████░░░░▏ 61% 628/1024 · eta 4s · 850 samples/s · 3 peers · loss 0.4213`, with the
 * phase in front when the peer is not training, at most `width` characters wide.
 */
export function formatStatusLine(status: PeerStatus, width: number): string {
  const segments = statusSegments(status);
  // Dropping whole segments keeps every number that is shown readable.
  while (segments.length > 1 && length(joinSegments(segments)) > width) {
    let drop = 0;
    segments.forEach((segment, index) => {
      if (segment.rank >= (segments[drop]?.rank ?? 0)) drop = index;
    });
    segments.splice(drop, 1);
  }
  return truncate(joinSegments(segments), width);
}

function statusSegments(status: PeerStatus): Segment[] {
  const segments: Segment[] = [];
  if (status.pauseReasons !== undefined && status.pauseReasons.length > 0) {
    const why = status.pauseReasons.map((reason) => PAUSE_REASON_TEXT[reason]).join(", ");
    segments.push({ text: `paused: ${why}`, rank: 0, glue: SEPARATOR });
  } else if (status.phase !== "training") {
    segments.push({ text: PHASE_LABELS[status.phase], rank: 0, glue: SEPARATOR });
  }
  segments.push({ text: `step ${status.step}`, rank: 1, glue: SEPARATOR });
  if (status.phase === "training" || status.phase === "averaging") {
    const ratio = status.targetBatchSize > 0 ? status.globalSamples / status.targetBatchSize : 0;
    const fraction = Number.isFinite(ratio) ? Math.min(1, Math.max(0, ratio)) : 0;
    const filled = Math.floor(fraction * BAR_CELLS);
    const bar = `▕${"█".repeat(filled)}${"░".repeat(BAR_CELLS - filled)}▏`;
    const counts = `${formatCount(status.globalSamples)}/${formatCount(status.targetBatchSize)}`;
    segments.push({ text: bar, rank: 8, glue: " " });
    segments.push({ text: `${Math.floor(fraction * 100)}%`, rank: 1, glue: " " });
    segments.push({ text: counts, rank: 7, glue: " " });
  }
  if (status.phase === "training") {
    segments.push({ text: `eta ${formatDuration(status.etaSeconds)}`, rank: 4, glue: SEPARATOR });
    segments.push({
      text: `${formatRate(status.localSamplesPerSecond)} samples/s`,
      rank: 3,
      glue: SEPARATOR,
    });
  }
  // What keeps the peer from the swarm replaces the peer count, which would only say "1 peer".
  const peers = `${status.peersOnline} ${status.peersOnline === 1 ? "peer" : "peers"}`;
  segments.push({
    text: status.swarmNote === undefined ? peers : sanitize(status.swarmNote),
    rank: status.swarmNote === undefined ? 2 : 0,
    glue: SEPARATOR,
  });
  if (status.network !== undefined)
    segments.push({ text: networkText(status.network), rank: 6, glue: SEPARATOR });
  if (status.loss !== undefined) {
    segments.push({ text: `loss ${status.loss.toFixed(4)}`, rank: 5, glue: SEPARATOR });
  }
  return segments;
}

/** "node: 3 direct", "client: 1 direct, 2 relayed, 1 upgraded": the mode, then members by path. */
export function networkText(network: PeerNetwork): string {
  const paths = (
    [
      ["direct", network.direct],
      ["relayed", network.relayed],
      ["upgraded", network.upgraded],
    ] as const
  ).flatMap(([path, count]) => (count > 0 ? [`${count} ${path}`] : []));
  return `${network.mode}: ${paths.length === 0 ? "no members connected" : paths.join(", ")}`;
}

function joinSegments(segments: readonly Segment[]): string {
  return segments.map((segment, index) => (index === 0 ? "" : segment.glue) + segment.text).join("");
}

/**
 * Columns the text takes. Every glyph the status line uses is one column wide and in the Basic
 * Multilingual Plane, so UTF-16 length is the column count and slicing never splits a character.
 */
function length(text: string): number {
  return text.length;
}

function truncate(text: string, width: number): string {
  if (length(text) <= width) return text;
  return width <= 0 ? "" : `${text.slice(0, width - 1)}…`;
}

/** `4s`, `3m05s`, `2h10m`; `?` when unknown (nobody is training). */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const total = Math.round(seconds);
  if (total < 60) return `${total}s`;
  if (total < 3600) return `${Math.floor(total / 60)}m${pad2(total % 60)}s`;
  const minutes = Math.round(total / 60);
  return `${Math.floor(minutes / 60)}h${pad2(minutes % 60)}m`;
}

function formatCount(count: number): string {
  if (!Number.isFinite(count)) return "?";
  if (count < 10_000) return String(Math.round(count));
  if (count < 1_000_000) return `${(count / 1e3).toFixed(1)}k`;
  return `${(count / 1e6).toFixed(1)}M`;
}

function formatRate(perSecond: number): string {
  if (!Number.isFinite(perSecond) || perSecond < 0) return "?";
  return perSecond >= 100 ? formatCount(perSecond) : perSecond.toFixed(1);
}

/** A pino JSON record as a human line; a line that is not a record is shown as it is. */
function formatRecord(json: string, now: () => number): string {
  let record: unknown;
  try {
    record = JSON.parse(json);
  } catch {
    return sanitize(json.trimEnd());
  }
  if (typeof record !== "object" || record === null) return sanitize(json.trimEnd());
  const { time, level, msg, ...fields } = record as Record<string, unknown>;
  const levelName = typeof level === "number" ? (pino.levels.labels[level] ?? String(level)) : "info";
  return formatLogLine(
    typeof time === "number" ? time : now(),
    levelName,
    typeof msg === "string" ? msg : "",
    fields,
  );
}

/** `HH:MM:SS level message key=value …` in local time. */
function formatLogLine(
  time: number,
  level: string,
  message: string,
  fields: Readonly<Record<string, unknown>>,
): string {
  const date = new Date(time);
  const clock = `${pad2(date.getHours())}:${pad2(date.getMinutes())}:${pad2(date.getSeconds())}`;
  const pairs = Object.entries(fields)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => ` ${sanitize(key)}=${formatValue(value)}`);
  return `${clock} ${level.padEnd(5)} ${sanitize(message)}${pairs.join("")}`;
}

function formatValue(value: unknown): string {
  if (typeof value === "string") return quoted(value);
  if (typeof value !== "object" || value === null) return String(value);
  // An Error, or pino's serialized `err` ({ type, message, stack }): the message is what helps.
  if ("message" in value && typeof value.message === "string") return quoted(value.message);
  try {
    return sanitize(JSON.stringify(value));
  } catch {
    return "[unserializable]";
  }
}

/** Quotes text that would otherwise be ambiguous in `key=value` form. */
function quoted(text: string): string {
  return sanitize(text === "" || /[\s"=]/u.test(text) ? JSON.stringify(text) : text);
}

/**
 * Escapes control characters: error messages can carry text from remote peers, and an escape
 * sequence in it must not be able to move the cursor or recolour the terminal.
 */
function sanitize(text: string): string {
  return text.replace(/\p{Cc}/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function pad2(value: number): string {
  return String(value).padStart(2, "0");
}
