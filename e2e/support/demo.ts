import { copyFile, mkdir, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import type { TestInfo } from "@playwright/test";
import {
  describeProcess,
  listenersOn,
  processesWithEnvironment,
  type ProcessInfo,
} from "../../scripts/process-table.ts";
import type { LogRecord, ProcessSet, RunningProcess } from "./processes.ts";
import type { Metrics } from "./runs.ts";

/**
 * `npm run demo` as a user runs it, on a data directory and a port of a test's own. It runs in a
 * process group of its own, so the test presses Ctrl-C by sending SIGINT to that group. Every process
 * of the demo (npm, the script, `next start` and its next-server, the aux, the peers) inherits the
 * BARNRAISE_DATA_DIR the test gives it, and that is how the test finds them all to SIGKILL at once:
 * next-server's command line names no directory, and the demo puts the platform, the aux and each
 * peer in process groups of their own. What the test reads is what a user sees: the peers' JSON
 * logs in <data dir>/logs and the platform's public API.
 */

export const DEMO_EXPERIMENT_ID = "demo";
const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

export function startDemo(
  processes: ProcessSet,
  name: string,
  dataDir: string,
  port: number,
): RunningProcess {
  const env: Record<string, string | undefined> = {
    ...process.env,
    BARNRAISE_DATA_DIR: dataDir,
    PORT: String(port),
    DEMO_PEERS: "2",
  };
  // The demo's defaults: a SQLite file and the data directory as storage.
  delete env.DATABASE_URL;
  delete env.BARNRAISE_STORAGE_URL;
  return processes.start({ name, command: "npm", args: ["run", "demo"], cwd: repoRoot, env, detached: true });
}

/** The running processes (zombies left out) started with this data directory in their environment. */
export function demoProcesses(dataDir: string): ProcessInfo[] {
  return processesWithEnvironment(`BARNRAISE_DATA_DIR=${dataDir}`).filter((info) => info.state !== "Z");
}

/**
 * SIGKILL to every process of the demo on `dataDir` at the same moment, as a power cut would; again
 * to any that appears meanwhile, until none is left (at most 10 s). Returns what it killed.
 */
export async function killDemo(dataDir: string): Promise<ProcessInfo[]> {
  const killed: ProcessInfo[] = [];
  const deadline = Date.now() + 10_000;
  for (;;) {
    const running = demoProcesses(dataDir);
    if (running.length === 0) return killed;
    if (Date.now() > deadline) {
      throw new Error(`still running 10 s after SIGKILL: ${running.map(describeProcess).join(", ")}`);
    }
    for (const info of running) {
      try {
        process.kill(info.pid, "SIGKILL");
      } catch {
        // It ended meanwhile.
      }
    }
    killed.push(...running.filter((info) => !killed.some((done) => done.pid === info.pid)));
    await sleep(100);
  }
}

/** Nothing of the demo runs any more and nothing listens on its port; says what is left otherwise. */
export function leftovers(dataDir: string, port: number): string[] {
  return [
    ...demoProcesses(dataDir).map(describeProcess),
    ...listenersOn(port).map((info) => `${describeProcess(info)} listening on port ${port}`),
  ];
}

/** One collaborative step as a peer logs it ("step N"). */
export interface PeerStep {
  readonly step: number;
  readonly groupSize: number;
  /** The group's total weight. */
  readonly samples: number;
  readonly localSamples: number;
  /** When it was logged, Unix ms. */
  readonly time: number;
}

/** The JSON records of a log file of the demo (logs/aux.log, logs/peer-N.log); none while it is missing. */
export async function demoLog(dataDir: string, file: string): Promise<LogRecord[]> {
  const text = await readFile(join(dataDir, "logs", file), "utf8").catch(() => "");
  const records: LogRecord[] = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("{")) continue;
    try {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed === "object" && parsed !== null) records.push(parsed as LogRecord);
    } catch {
      // The last line, cut short while it is written.
    }
  }
  return records;
}

export async function peerSteps(dataDir: string, peer: number): Promise<PeerStep[]> {
  return (await demoLog(dataDir, `peer-${peer}.log`)).flatMap((record) =>
    typeof record.msg === "string" && /^step \d+$/.test(record.msg)
      ? [
          {
            step: Number(record.step),
            groupSize: Number(record.groupSize),
            samples: Number(record.samples),
            localSamples: Number(record.localSamples),
            time: Number(record.time),
          },
        ]
      : [],
  );
}

/** A step this peer took together with another: averaged in a group, with more samples than its own. */
export function isShared(step: PeerStep): boolean {
  return step.groupSize >= 2 && step.samples > step.localSamples;
}

/**
 * A peer's last `count` distinct warnings and errors (refusals among them), each with the message of
 * the error it carries, shortened.
 */
export async function peerTroubles(dataDir: string, peer: number, count = 3): Promise<string[]> {
  const lines = (await demoLog(dataDir, `peer-${peer}.log`))
    .filter((record) => Number(record.level) >= 40)
    .map((record) => {
      const err = record.err as { message?: unknown } | undefined;
      const cause = typeof err?.message === "string" ? ` (${err.message.slice(-160)})` : "";
      return `${String(record.msg)}${cause}`;
    });
  return [...new Set(lines.reverse())].slice(0, count).reverse();
}

/** Every step the platform recorded (all timelines), as its public API lists them; undefined while it is down. */
export async function recordedSteps(port: number): Promise<Metrics["points"] | undefined> {
  try {
    const response = await fetch(
      `http://localhost:${port}/api/v1/experiments/${DEMO_EXPERIMENT_ID}/metrics?maxPoints=5000`,
      { signal: AbortSignal.timeout(5_000) },
    );
    if (!response.ok) return undefined;
    return ((await response.json()) as Metrics).points;
  } catch {
    return undefined;
  }
}

/** Copies the demo's logs (aux, peers) to `dir`: a later start of the demo overwrites them. */
export async function keepLogs(dataDir: string, dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const files = await readdir(join(dataDir, "logs")).catch(() => []);
  for (const file of files) await copyFile(join(dataDir, "logs", file), join(dir, file));
}

/** Attaches every file of `dir` to the report, under `prefix`. */
export async function attachDir(testInfo: TestInfo, dir: string, prefix: string): Promise<void> {
  const files = await readdir(dir).catch(() => []);
  for (const file of files) {
    await testInfo.attach(`${prefix}${file}`, { path: join(dir, file), contentType: "text/plain" });
  }
}

/**
 * Calls `check` every second until it returns `{ done }`; fails at `deadline` (Unix ms) with what it
 * last reported as `{ waiting }`, or as soon as `demo` exits.
 */
export async function pollUntil<T>(
  what: string,
  deadline: number,
  demo: RunningProcess,
  check: () => Promise<{ readonly done: T } | { readonly waiting: string }>,
): Promise<T> {
  for (;;) {
    const result = await check();
    if ("done" in result) return result.done;
    const last = result.waiting;
    if (demo.status !== undefined) {
      throw new Error(`${demo.name} exited before ${what}; last seen: ${last}\n${demo.tail(30)}`);
    }
    if (Date.now() >= deadline) throw new Error(`${what}: did not happen; last seen: ${last}`);
    await sleep(1_000);
  }
}
