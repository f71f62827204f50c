import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { LogTail } from "./log-records.ts";
import type { IncarnationView, Role, StopIntent } from "./types.ts";
import { sleep } from "./waits.ts";

/**
 * The processes the soak runs. Each runs in its own process group (so a signal reaches npm, its
 * shell and `next start` together), and each incarnation writes its stdout and stderr to its own
 * file, logs/<name>.<n>.log. Every group still alive is SIGKILLed when the soak exits, however it
 * exits (see `killAllNow`).
 */

export interface ProcessSpec {
  readonly name: string;
  readonly role: Role;
  readonly command: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly logDir: string;
}

type Exit = NonNullable<IncarnationView["exit"]>;

/** One incarnation while the soak holds it: mutable until it has exited. */
export interface Incarnation extends IncarnationView {
  endedAt: number | null;
  exit: Exit | null;
  stop: StopIntent | null;
  forced: string | null;
  readonly pid: number;
  readonly tail: LogTail;
  /** Settles when the process has exited (its group may outlive it: see `groupGone`). */
  readonly exited: Promise<Exit>;
}

/** Process groups started and not yet seen gone, for the last-resort kill on exit. */
const liveGroups = new Set<number>();

export class ManagedProcess {
  readonly spec: ProcessSpec;
  readonly incarnations: Incarnation[] = [];

  constructor(spec: ProcessSpec) {
    this.spec = spec;
  }

  get current(): Incarnation | undefined {
    return this.incarnations.at(-1);
  }

  get running(): boolean {
    const current = this.current;
    return current !== undefined && current.exit === null;
  }

  /** Starts a new incarnation with `env`; the previous one must have exited. */
  start(env: Readonly<Record<string, string | undefined>>): Incarnation {
    if (this.running) throw new Error(`${this.spec.name} is still running`);
    const index = this.incarnations.length;
    const logFile = join(this.spec.logDir, `${this.spec.name}.${index}.log`);
    const fd = openSync(logFile, "a");
    const child = spawn(this.spec.command, [...this.spec.args], {
      cwd: this.spec.cwd,
      env,
      detached: true,
      stdio: ["ignore", fd, fd],
    });
    closeSync(fd);
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${this.spec.name} (${this.spec.command})`);
    liveGroups.add(pid);
    let resolveExit: (exit: Exit) => void = () => undefined;
    const incarnation: Incarnation = {
      name: this.spec.name,
      role: this.spec.role,
      index,
      logFile,
      startedAt: Date.now(),
      endedAt: null,
      exit: null,
      stop: null,
      forced: null,
      pid,
      tail: new LogTail(logFile),
      exited: new Promise<Exit>((resolve) => (resolveExit = resolve)),
    };
    child.once("exit", (code, signal) => {
      incarnation.endedAt = Date.now();
      incarnation.exit = { code, signal };
      resolveExit(incarnation.exit);
    });
    child.once("error", (error) => {
      if (incarnation.exit !== null) return;
      incarnation.endedAt = Date.now();
      incarnation.exit = { code: null, signal: `spawn error: ${error.message}` };
      resolveExit(incarnation.exit);
    });
    this.incarnations.push(incarnation);
    return incarnation;
  }

  /** Records that the current incarnation is expected to end by itself now, with one of `codes`. */
  expectEnd(reason: string, codes: readonly number[]): void {
    const current = this.current;
    if (current === undefined || current.exit !== null) return;
    current.stop ??= { reason, at: Date.now(), expectCodes: codes };
  }

  /** Sends `signal` to the current incarnation's process group, recording why (the first reason stays). */
  signal(signal: NodeJS.Signals, reason: string, expectCodes?: readonly number[]): void {
    const current = this.current;
    if (current === undefined || current.exit !== null) return;
    current.stop ??= { reason, at: Date.now(), ...(expectCodes === undefined ? {} : { expectCodes }) };
    signalGroup(current.pid, signal);
  }

  /**
   * Signals the current incarnation and waits up to `graceMs` for it and its group to be gone;
   * then SIGKILLs the group and records that it had to. Resolves to true when it ended in time.
   */
  async stop(signal: NodeJS.Signals, reason: string, graceMs: number, expectCodes?: readonly number[]) {
    const current = this.current;
    if (current === undefined) return true;
    if (current.exit === null) this.signal(signal, reason, expectCodes);
    return this.ensureGone(
      current,
      graceMs,
      `did not end within ${graceMs / 1000} s of ${signal} (${reason})`,
    );
  }

  /** Waits up to `graceMs` for `incarnation`'s group to be gone, else SIGKILLs it and notes `why`. */
  async ensureGone(incarnation: Incarnation, graceMs: number, why: string): Promise<boolean> {
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline && !(incarnation.exit !== null && groupGone(incarnation.pid))) {
      await sleep(100);
    }
    const inTime = incarnation.exit !== null && groupGone(incarnation.pid);
    if (!inTime) {
      incarnation.forced ??= why;
      signalGroup(incarnation.pid, "SIGKILL");
      await incarnation.exited;
      while (!groupGone(incarnation.pid)) await sleep(50);
    }
    liveGroups.delete(incarnation.pid);
    return inTime;
  }
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is gone already
  }
}

/** True when no process is left in the group (signal 0 tests without sending). */
export function groupGone(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH";
  }
}

/** SIGKILLs every group the soak started that may still be alive; synchronous, for `process.on("exit")`. */
export function killAllNow(): void {
  for (const pgid of liveGroups) signalGroup(pgid, "SIGKILL");
  liveGroups.clear();
}
