import { spawn, type ChildProcessByStdio } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import type { Host } from "@barnraise/netlab";

/**
 * `barnraise-peer` as a real child process with JSON logs: its records are parsed as they arrive
 * so a test can wait for one ("step 5", "evaluated on the test split" …) and read its fields.
 */

const CLI = new URL("../../src/cli.ts", import.meta.url).pathname;

export interface LogRecord {
  readonly level: number;
  readonly msg: string;
  readonly [field: string]: unknown;
}

export class PeerCliProcess {
  readonly name: string;
  readonly records: LogRecord[] = [];
  /** stderr and any stdout line that is not JSON. */
  readonly otherOutput: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly #child: ChildProcessByStdio<null, Readable, Readable>;
  readonly #waiters = new Set<() => void>();

  /**
   * `cli`: another program with the same JSON logs (the aux peer's). `host`: a netlab host to run it
   * on (in its network namespace) instead of this machine's network.
   */
  constructor(
    name: string,
    args: readonly string[],
    env: Record<string, string> = {},
    cli = CLI,
    host?: Pick<Host, "spawnNode">,
  ) {
    this.name = name;
    const childEnv = { ...process.env, ...env };
    this.#child =
      host === undefined
        ? spawn(process.execPath, [cli, "--json", ...args], {
            stdio: ["ignore", "pipe", "pipe"],
            env: childEnv,
          })
        : (host.spawnNode(cli, ["--json", ...args], { env: childEnv }) as ChildProcessByStdio<
            null,
            Readable,
            Readable
          >);
    createInterface({ input: this.#child.stdout }).on("line", (line) => {
      try {
        this.records.push(JSON.parse(line) as LogRecord);
      } catch {
        this.otherOutput.push(line);
      }
      this.#notify();
    });
    createInterface({ input: this.#child.stderr }).on("line", (line) => {
      this.otherOutput.push(line);
      this.#notify();
    });
    this.exited = new Promise((resolve) => {
      this.#child.once("exit", (code, signal) => {
        resolve({ code, signal });
        this.#notify();
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get running(): boolean {
    return this.#child.exitCode === null && this.#child.signalCode === null;
  }

  kill(signal: NodeJS.Signals): void {
    this.#child.kill(signal);
  }

  /** The first record `match` accepts, waiting up to `timeoutMs` for it. */
  async waitFor(match: (record: LogRecord) => boolean, what: string, timeoutMs = 60_000): Promise<LogRecord> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.records.find(match);
      if (found !== undefined) return found;
      if (!this.running) throw new Error(`${this.name} exited before ${what}\n${this.transcript()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`${this.name}: no ${what} within ${timeoutMs} ms\n${this.transcript()}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(left, 1000));
        function done(): void {
          clearTimeout(timer);
          resolve();
        }
        this.#waiters.add(done);
      });
    }
  }

  /** The highest step this peer has logged applying or loading. */
  latestStep(): number {
    let step = 0;
    for (const record of this.records) {
      if (
        typeof record.step === "number" &&
        (record.msg.startsWith("step ") || record.msg.startsWith("loaded"))
      )
        step = Math.max(step, record.step);
    }
    return step;
  }

  /** The last 40 lines of output, for failure messages. */
  transcript(): string {
    const lines = [...this.records.map((record) => JSON.stringify(record)), ...this.otherOutput];
    return lines.slice(-40).join("\n");
  }

  #notify(): void {
    for (const waiter of this.#waiters) waiter();
    this.#waiters.clear();
  }
}

/**
 * Writes each process's latest events (status records left out) and other output to stderr: when a
 * multi-process test fails, the others' logs tell what the swarm was doing meanwhile.
 */
export function writeEvents(processes: readonly PeerCliProcess[], count = 40): void {
  for (const child of processes) {
    const events = child.records.filter((record) => record.msg !== "status").slice(-count);
    const lines = [...events.map((record) => JSON.stringify(record)), ...child.otherOutput.slice(-10)];
    process.stderr.write(`---- ${child.name}\n${lines.join("\n")}\n`);
  }
}
