import { spawn, type ChildProcess } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { createInterface } from "node:readline";
import type { TestInfo } from "@playwright/test";

/**
 * Real processes started by a test: their output kept line by line (pino JSON records parsed), a
 * way to wait for a record or for the exit, and a stop that asks first (SIGINT) and insists later
 * (SIGKILL). A `ProcessSet` stops all of a story's processes and attaches their output to the
 * report.
 */

/** One pino JSON line: `msg`, `level`, and whatever the record carries. */
export type LogRecord = Readonly<Record<string, unknown>> & { readonly msg?: unknown };

export interface ExitStatus {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface StartProcessOptions {
  /** Names the process in errors and report attachments. */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  /**
   * Runs it in a process group of its own, as a shell runs a command: its signals (stop, kill,
   * signal) then go to the whole group, as Ctrl-C in a terminal does.
   */
  readonly detached?: boolean;
}

/** A record's message matches `msg` (a string must be equal) and, when given, `where` holds. */
export function recordMatcher(
  msg: string | RegExp,
  where: (record: LogRecord) => boolean = () => true,
): (record: LogRecord) => boolean {
  return (record) => {
    const text = typeof record.msg === "string" ? record.msg : "";
    return (typeof msg === "string" ? text === msg : msg.test(text)) && where(record);
  };
}

export class RunningProcess {
  readonly name: string;
  /** Settles once the process has exited and its output is read to the end. */
  readonly exited: Promise<ExitStatus>;
  readonly #child: ChildProcess;
  readonly #detached: boolean;
  readonly #lines: string[] = [];
  readonly #records: LogRecord[] = [];
  readonly #listeners = new Set<() => void>();
  #status: ExitStatus | undefined;

  constructor(options: StartProcessOptions) {
    this.name = options.name;
    this.#detached = options.detached === true;
    this.#child = spawn(options.command, [...options.args], {
      cwd: options.cwd,
      env: options.env,
      detached: this.#detached,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const { stdout, stderr } = this.#child;
    if (stdout === null || stderr === null) throw new Error(`${this.name}: no output pipes`);
    createInterface({ input: stdout, crlfDelay: Infinity }).on("line", (line) => {
      this.#take(line, true);
    });
    createInterface({ input: stderr, crlfDelay: Infinity }).on("line", (line) => {
      this.#take(`[stderr] ${line}`, false);
    });
    this.exited = new Promise((resolve) => {
      // "close" comes after the output streams ended, so every record is in by then.
      this.#child.once("close", (code, signal) => {
        this.#status = { code, signal };
        this.#notify();
        resolve(this.#status);
      });
      this.#child.once("error", (error) => {
        this.#take(`[spawn error] ${error.message}`, false);
        this.#status = { code: null, signal: null };
        this.#notify();
        resolve(this.#status);
      });
    });
  }

  /** The exit status, or undefined while the process runs. */
  get status(): ExitStatus | undefined {
    return this.#status;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  records(): readonly LogRecord[] {
    return this.#records;
  }

  /** Records matching `predicate`, oldest first. */
  filter(predicate: (record: LogRecord) => boolean): LogRecord[] {
    return this.#records.filter(predicate);
  }

  /** The last `count` lines of output (stdout and stderr, in arrival order). */
  tail(count = 100): string {
    return this.#lines.slice(-count).join("\n");
  }

  /**
   * Resolves with the first record (from the start of the output) that matches; rejects when the
   * process exits or `timeoutMs` passes first, with the output's tail in the message.
   */
  async waitForRecord(
    description: string,
    predicate: (record: LogRecord) => boolean,
    timeoutMs: number,
  ): Promise<LogRecord> {
    return this.#waitUntil(`the record "${description}"`, timeoutMs, () => {
      const found = this.#records.find(predicate);
      if (found !== undefined) return found;
      if (this.#status !== undefined) {
        throw this.#failure(`exited (${describeExit(this.#status)}) before it logged "${description}"`);
      }
      return undefined;
    });
  }

  /** Resolves with the exit status; rejects with the output's tail after `timeoutMs`. */
  async waitForExit(timeoutMs: number): Promise<ExitStatus> {
    return this.#waitUntil("its exit", timeoutMs, () => this.#status);
  }

  /** SIGKILL at once, as a crash or a power cut would. */
  async kill(): Promise<ExitStatus> {
    if (this.#status === undefined) this.signal("SIGKILL");
    return this.exited;
  }

  /** Sends `name` to the process, or to its whole process group when it was started detached. */
  signal(name: NodeJS.Signals): void {
    if (!this.#detached || this.#child.pid === undefined) {
      this.#child.kill(name);
      return;
    }
    try {
      process.kill(-this.#child.pid, name);
    } catch {
      // The group is gone already.
    }
  }

  /** SIGINT, then SIGKILL if it is still running after `graceMs`. */
  async stop(graceMs = 10_000): Promise<ExitStatus> {
    if (this.#status !== undefined) return this.#status;
    this.signal("SIGINT");
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.#take(`[test] still running ${graceMs / 1000} s after SIGINT: SIGKILL`, false);
        this.signal("SIGKILL");
        resolve();
      }, graceMs);
    });
    await Promise.race([this.exited, killed]);
    clearTimeout(timer);
    return this.exited;
  }

  #take(line: string, mayBeJson: boolean): void {
    this.#lines.push(line);
    if (mayBeJson && line.startsWith("{")) {
      try {
        const parsed: unknown = JSON.parse(line);
        if (typeof parsed === "object" && parsed !== null) this.#records.push(parsed as LogRecord);
      } catch {
        // A line that only looks like JSON stays a plain line.
      }
    }
    this.#notify();
  }

  #notify(): void {
    for (const listener of this.#listeners) listener();
  }

  /** Re-evaluates `check` on every new line and on exit until it returns a value or throws. */
  async #waitUntil<T>(what: string, timeoutMs: number, check: () => T | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        this.#listeners.delete(listener);
        settle();
      };
      const listener = () => {
        try {
          const value = check();
          if (value !== undefined) {
            finish(() => {
              resolve(value);
            });
          }
        } catch (error) {
          finish(() => {
            reject(error instanceof Error ? error : new Error(String(error)));
          });
        }
      };
      const timer = setTimeout(() => {
        finish(() => {
          reject(this.#failure(`did not show ${what} within ${timeoutMs / 1000} s`));
        });
      }, timeoutMs);
      this.#listeners.add(listener);
      listener();
    });
  }

  #failure(message: string): Error {
    return new Error(`${this.name} ${message}\n--- last lines of ${this.name} ---\n${this.tail(40)}`);
  }
}

export function describeExit(status: ExitStatus): string {
  return status.signal === null ? `code ${String(status.code)}` : `signal ${status.signal}`;
}

/** The processes of one story: started together, stopped together, reported together. */
export class ProcessSet {
  readonly #processes: RunningProcess[] = [];

  start(options: StartProcessOptions): RunningProcess {
    const running = new RunningProcess(options);
    this.#processes.push(running);
    return running;
  }

  /** Stops every process still running (SIGINT, SIGKILL after `graceMs`), all at the same time. */
  async stopAll(graceMs = 10_000): Promise<void> {
    await Promise.all(this.#processes.map((running) => running.stop(graceMs)));
  }

  /**
   * Attaches each process's whole output to the test's report, as a file in the test's output
   * directory (it stays under test-results/ for reading after the run).
   */
  async attachLogs(testInfo: TestInfo): Promise<void> {
    for (const running of this.#processes) {
      const status =
        running.status === undefined ? "still running" : `exited, ${describeExit(running.status)}`;
      const path = testInfo.outputPath(`${running.name}.log`);
      await writeFile(
        path,
        `# ${running.name} (pid ${String(running.pid)}, ${status})\n${running.tail(Infinity)}\n`,
      );
      await testInfo.attach(`${running.name}.log`, { path, contentType: "text/plain" });
    }
  }
}
