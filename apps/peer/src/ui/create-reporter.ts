/**
 * Picks how the peer reports: a live display when a person watches the terminal, JSON lines on stdout
 * when the output goes to a file, a pipe or a log collector, or when `--json` asks for it.
 */
import { pino } from "pino";
import { createJsonReporter, type LogDestination } from "./json-reporter.ts";
import type { Reporter } from "@barnraise/volunteer";
import { createTtyReporter, type LogThreshold, type TerminalStream } from "./tty-reporter.ts";

export type { LogThreshold } from "./tty-reporter.ts";

/** The slice of process.stdout / process.stderr the choice needs. */
export interface OutputStream extends TerminalStream {
  readonly isTTY?: boolean | undefined;
  /** When present, JSON is written straight to this descriptor, synchronously. */
  readonly fd?: number | undefined;
}

export interface CreateReporterOptions {
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  /** Structured logs even on a terminal. */
  readonly json?: boolean;
  /** Text of `--log-level`; validated with parseLogLevel. */
  readonly logLevel?: string;
}

const LOG_THRESHOLDS: readonly LogThreshold[] = ["debug", "info", "warn", "error"];

/**
 * The display goes to stderr, so stdout stays free for a command's output; JSON goes to stdout,
 * where log collectors look for it.
 */
export function createReporter(options: CreateReporterOptions): Reporter {
  const level = options.logLevel === undefined ? undefined : parseLogLevel(options.logLevel);
  if (options.stderr.isTTY === true && options.json !== true) {
    return createTtyReporter({ stream: options.stderr, level });
  }
  return createJsonReporter({ destination: synchronous(options.stdout), level });
}

/** `debug`, `info`, `warn` or `error` (any case); anything else is a RangeError saying so. */
export function parseLogLevel(text: string): LogThreshold {
  const wanted = text.trim().toLowerCase();
  const level = LOG_THRESHOLDS.find((candidate) => candidate === wanted);
  if (level === undefined) {
    throw new RangeError(
      `unknown log level ${JSON.stringify(text)}: use one of ${LOG_THRESHOLDS.join(", ")}`,
    );
  }
  return level;
}

/**
 * Node writes to a pipe asynchronously, so records still queued when the peer exits would be lost;
 * a synchronous destination on the same descriptor keeps them.
 */
function synchronous(stream: OutputStream): LogDestination {
  return stream.fd === undefined ? stream : pino.destination({ fd: stream.fd, sync: true });
}
