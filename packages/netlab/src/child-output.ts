/**
 * Reading what processes spawned in a lab report. A benchmark typically starts one Node process per
 * host, each printing JSON lines on stdout, waits for a "ready" line from each, and collects the rest
 * when they exit. {@link watchJsonLines} keeps reading for the child's whole life, so a child never
 * blocks on a full stdout pipe.
 */
import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { NetLabError } from "./errors.ts";

/** How a watched child ended, with everything it printed. */
export interface ChildOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Every stdout line that parsed as JSON, in order. */
  lines: unknown[];
  /** Stdout lines that were not JSON. */
  otherLines: string[];
  stderr: string;
}

/** A live view of a child's JSON output. */
export interface JsonLineWatch {
  /** JSON lines seen so far. */
  readonly lines: readonly unknown[];
  /** Stderr so far. */
  readonly stderr: string;
  /**
   * The first JSON line (already seen or yet to come) that `accept` takes. Rejects with COMMAND_FAILED
   * if the child exits first or `timeoutMs` passes; the message includes the child's stderr.
   */
  waitFor<T>(accept: (value: unknown) => value is T, timeoutMs?: number): Promise<T>;
  /** Resolves once the child has exited and its stdout is drained. */
  readonly exited: Promise<ChildOutcome>;
}

/** Starts reading the child's stdout (JSON lines) and stderr; both must be piped. */
export function watchJsonLines(child: ChildProcess): JsonLineWatch {
  const { stdout, stderr: stderrStream } = child;
  if (stdout === null || stderrStream === null) {
    throw new NetLabError("INVALID_ARGUMENT", "watchJsonLines needs the child's stdout and stderr piped");
  }
  const lines: unknown[] = [];
  const otherLines: string[] = [];
  const listeners = new Set<(value: unknown) => void>();
  let stderr = "";
  stderrStream.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const stdoutDone = new Promise<void>((resolve) => {
    const reader = createInterface({ input: stdout, crlfDelay: Infinity });
    reader.on("line", (line) => {
      const trimmed = line.trim();
      if (trimmed === "") return;
      try {
        const value: unknown = JSON.parse(trimmed);
        lines.push(value);
        for (const listener of listeners) listener(value);
      } catch {
        otherLines.push(line);
      }
    });
    reader.on("close", resolve);
  });
  const exited = Promise.all([waitForExit(child), stdoutDone]).then(([status]) => ({
    ...status,
    lines,
    otherLines,
    stderr,
  }));

  function waitFor<T>(accept: (value: unknown) => value is T, timeoutMs = 10_000): Promise<T> {
    const seen = lines.find(accept);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise<T>((resolve, reject) => {
      const finish = (error?: NetLabError, value?: T): void => {
        clearTimeout(timer);
        listeners.delete(listener);
        if (error === undefined) resolve(value as T);
        else reject(error);
      };
      const listener = (value: unknown): void => {
        if (accept(value)) finish(undefined, value);
      };
      const timer = setTimeout(() => {
        finish(
          new NetLabError(
            "COMMAND_FAILED",
            `no expected JSON line within ${timeoutMs} ms; stderr: ${stderr}`,
          ),
        );
      }, timeoutMs);
      listeners.add(listener);
      void exited.then((outcome) => {
        const how = outcome.signal ?? `code ${outcome.code}`;
        finish(
          new NetLabError(
            "COMMAND_FAILED",
            `process exited (${how}) before the expected JSON line; stderr: ${stderr}`,
          ),
        );
      });
    });
  }

  return {
    lines,
    get stderr() {
      return stderr;
    },
    waitFor,
    exited,
  };
}

/** Resolves when the child has exited, with its exit code (null if a signal ended it) and signal. */
export function waitForExit(
  child: ChildProcess,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) =>
    child.once("exit", (code, signal) => {
      resolve({ code, signal });
    }),
  );
}
