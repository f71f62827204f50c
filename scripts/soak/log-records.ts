import { closeSync, openSync, readSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import type { ErrorLine, StateLoadLine, StatusLine, StepLine } from "./types.ts";

/**
 * Reading the processes' output: pino JSON lines (the peers', the aux's and the platform's own
 * records) among plain text (Next.js's banner and errors, warnings of native libraries).
 */

/** One line as read, with when the soak read it. */
export interface RawLine {
  readonly text: string;
  readonly readAt: number;
}

/** A pino record: its message, level and time, and whatever else it carries. */
export type LogRecord = Readonly<Record<string, unknown>>;

export function parseRecord(text: string): LogRecord | null {
  if (!text.startsWith("{")) return null;
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as LogRecord) : null;
  } catch {
    return null;
  }
}

const STEP_MESSAGE = /^step \d+$/;
const DIGEST = /^[0-9a-f]{16}$/;

/** A peer's "step N" record, or null for any other line (or one that lacks a field). */
export function stepLine(record: LogRecord): StepLine | null {
  const { msg, time, step, groupSize, samples, localSamples, shared, stateDigest } = record;
  if (typeof msg !== "string" || !STEP_MESSAGE.test(msg)) return null;
  if (
    typeof time !== "number" ||
    typeof step !== "number" ||
    typeof groupSize !== "number" ||
    typeof samples !== "number" ||
    typeof localSamples !== "number" ||
    typeof shared !== "boolean" ||
    typeof stateDigest !== "string" ||
    !DIGEST.test(stateDigest)
  ) {
    return null;
  }
  return { time, step, groupSize, samples, localSamples, shared, stateDigest };
}

const STATE_LOAD_MESSAGE = /^loaded the swarm's state at step \d+$/;

/** A peer's "loaded the swarm's state at step N" record, or null. */
export function stateLoadLine(record: LogRecord): StateLoadLine | null {
  const { msg, time, step } = record;
  if (typeof msg !== "string" || !STATE_LOAD_MESSAGE.test(msg)) return null;
  if (typeof time !== "number" || typeof step !== "number") return null;
  return { time, step };
}

/** A peer's "status" record, or null. */
export function statusLine(record: LogRecord): StatusLine | null {
  const { msg, time, phase, step, swarmNote } = record;
  if (msg !== "status" || typeof time !== "number" || typeof phase !== "string") return null;
  return {
    time,
    phase,
    step: typeof step === "number" ? step : null,
    swarmNote: typeof swarmNote === "string" ? swarmNote : null,
  };
}

/** pino's level numbers. */
export const ERROR_LEVEL = 50;

/** Next.js prints a failed request or an uncaught error as text starting with "⨯", not as pino JSON. */
const TEXT_ERROR = /^\s*(⨯|Error:|TypeError:|RangeError:|Unhandled|uncaughtException)/;

/**
 * The platform's error-level lines: pino records at level ≥ 50, and errors Next.js printed as text
 * (their time: the last record's before them, else when the soak read them).
 */
export function errorLines(lines: readonly RawLine[], file: string): ErrorLine[] {
  const errors: ErrorLine[] = [];
  let lastTime: number | undefined;
  for (const line of lines) {
    const record = parseRecord(line.text);
    if (record !== null) {
      const time = typeof record.time === "number" ? record.time : line.readAt;
      lastTime = time;
      if (typeof record.level === "number" && record.level >= ERROR_LEVEL) {
        errors.push({ time, level: record.level, text: line.text, file });
      }
    } else if (TEXT_ERROR.test(line.text)) {
      errors.push({ time: lastTime ?? line.readAt, level: ERROR_LEVEL, text: line.text.trim(), file });
    }
  }
  return errors;
}

/**
 * Reads a growing log file from where it stopped last time, complete lines only; a partial last
 * line waits for its end (or for `poll(true)` once the process has exited).
 */
export class LogTail {
  readonly file: string;
  readonly lines: RawLine[] = [];
  #offset = 0;
  #partial = "";
  /** Keeps a character split between two reads whole. */
  readonly #decoder = new StringDecoder("utf8");

  constructor(file: string) {
    this.file = file;
  }

  /** Reads what was appended; returns the new complete lines (with the partial one when `final`). */
  poll(now: number, final = false): RawLine[] {
    const added: RawLine[] = [];
    let fd: number;
    try {
      fd = openSync(this.file, "r");
    } catch {
      return added; // not created yet
    }
    try {
      const buffer = Buffer.alloc(1 << 16);
      for (;;) {
        const read = readSync(fd, buffer, 0, buffer.length, this.#offset);
        if (read === 0) break;
        this.#offset += read;
        this.#partial += this.#decoder.write(buffer.subarray(0, read));
      }
    } finally {
      closeSync(fd);
    }
    const parts = this.#partial.split("\n");
    this.#partial = final ? "" : (parts.pop() ?? "");
    for (const text of parts) if (text.length > 0) added.push({ text, readAt: now });
    this.lines.push(...added);
    return added;
  }
}
