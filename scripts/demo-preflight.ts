// Before `npm run demo` starts anything on a data directory, clears what an earlier start left in its
// way, or says what is in the way and fails:
//
// 1. Another demo running on the same data directory: it says so and fails (two demos on one database
//    and one set of swarm identities would fight each other).
// 2. Processes of an earlier demo on that data directory whose script is gone (it got SIGKILL, or its
//    terminal died): the platform, the aux and the peers run in process groups of their own and outlive
//    it. They hold the port, and their old tokens are revoked by this start. They get SIGTERM, and
//    SIGKILL after 15 s.
// 3. The port taken by any other program: it names the program, and says when it is stopped
//    (suspended with Ctrl-Z, say), since a stopped server accepts connections but never answers.
// 4. Other programs with the SQLite database open: a note, since SQLite shares the file, but one that
//    keeps a write transaction open makes the demo's writes fail with "database is locked".
//
// A demo marks every process it starts with BARNRAISE_DEMO_DATA_DIR=<its data directory> in their
// environment; that is how they are found (never by name), so nothing else is ever stopped.
//
//   node scripts/demo-preflight.ts --data-dir DIR --port PORT [--database FILE]
//
// Exits 0 when the demo can start, 1 (after saying why) when it cannot.
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import {
  ancestorsOf,
  describeProcess,
  isRunning,
  listenersOn,
  listProcesses,
  processesWithEnvironment,
  processesWithFileOpen,
  type ProcessInfo,
} from "./process-table.ts";

const DEMO_MARKER = "BARNRAISE_DEMO_DATA_DIR";
const LEFTOVER_GRACE_MS = 15_000;
const KILL_GRACE_MS = 5_000;
const NOTE_EVERY_MS = 5_000;

const { values } = parseArgs({
  options: {
    "data-dir": { type: "string" },
    port: { type: "string" },
    database: { type: "string" },
  },
});
const dataDir = values["data-dir"];
const port = Number(values.port);
if (dataDir === undefined || !Number.isInteger(port)) {
  console.error("usage: node scripts/demo-preflight.ts --data-dir DIR --port PORT [--database FILE]");
  process.exit(64);
}
const log = (line: string) => {
  console.error(`[barnraise] ${line}`);
};

const table = listProcesses();
const mine = new Set([process.pid, ...ancestorsOf(process.pid, table).map((info) => info.pid)]);
const others = (list: readonly ProcessInfo[]) => list.filter((info) => !mine.has(info.pid));

const demoProcesses = others(processesWithEnvironment(`${DEMO_MARKER}=${dataDir}`));
const liveScript = demoProcesses
  .flatMap((info) => ancestorsOf(info.pid, table))
  .find((info) => info.command.includes("scripts/demo.sh") && !mine.has(info.pid));
if (liveScript !== undefined) {
  log(
    `a demo is already running on ${dataDir}: ${describeProcess(liveScript)}. Stop it first (Ctrl-C in ` +
      `its terminal, or kill -INT -- -${liveScript.pgid}), or start this one with another BARNRAISE_DATA_DIR`,
  );
  process.exit(1);
}
if (demoProcesses.length > 0) {
  log(
    `an earlier demo on ${dataDir} ended without stopping what it started; stopping its ` +
      `${demoProcesses.length} leftover processes: ${demoProcesses.map(describeProcess).join(", ")}`,
  );
  if (!(await stopProcesses(demoProcesses))) process.exit(1);
}

if (!(await portIsFree(port))) {
  const holders = listenersOn(port);
  const who = holders.length > 0 ? ` by ${holders.map(describeProcess).join(", ")}` : " by another program";
  const stopped = holders.some((info) => info.state === "T")
    ? " It is stopped: it accepts connections but never answers them (resume it with `kill -CONT`, or end it)."
    : "";
  log(
    `port ${port} is in use${who}.${stopped} Stop it, or start the demo on another port: PORT=8080 npm run demo`,
  );
  process.exit(1);
}

if (values.database !== undefined) {
  const holders = others(processesWithFileOpen(values.database));
  if (holders.length > 0) {
    log(
      `note: ${holders.map(describeProcess).join(", ")} has the database ${values.database} open. The demo ` +
        `shares it, but if a step fails with "database is locked" or "Operation has timed out", stop that program`,
    );
  }
}

/** SIGTERM to each, then SIGKILL to those still running after the grace; true once all are gone. */
async function stopProcesses(list: readonly ProcessInfo[]): Promise<boolean> {
  signal(list, "SIGTERM");
  if (await allGone(list, LEFTOVER_GRACE_MS, "the leftover processes to stop after SIGTERM")) return true;
  const left = list.filter((info) => isRunning(info.pid));
  log(
    `still running ${LEFTOVER_GRACE_MS / 1000} s after SIGTERM, sending SIGKILL: ${left.map(describeProcess).join(", ")}`,
  );
  signal(left, "SIGKILL");
  if (await allGone(left, KILL_GRACE_MS, "the leftover processes to end after SIGKILL")) return true;
  const stuck = left.filter((info) => isRunning(info.pid)).map(describeProcess);
  log(
    `these processes of an earlier demo do not end even on SIGKILL: ${stuck.join(", ")}. End them, then start again`,
  );
  return false;
}

function signal(list: readonly ProcessInfo[], name: NodeJS.Signals): void {
  for (const info of list) {
    try {
      process.kill(info.pid, name);
    } catch {
      // It has ended already.
    }
  }
}

async function allGone(list: readonly ProcessInfo[], withinMs: number, what: string): Promise<boolean> {
  const started = Date.now();
  let noteAt = started + NOTE_EVERY_MS;
  for (;;) {
    const running = list.filter((info) => isRunning(info.pid));
    if (running.length === 0) return true;
    const now = Date.now();
    if (now - started >= withinMs) return false;
    if (now >= noteAt) {
      log(
        `still waiting for ${what} (${Math.round((now - started) / 1000)} s of ${withinMs / 1000} s): ` +
          running.map((info) => `pid ${info.pid}`).join(", "),
      );
      noteAt += NOTE_EVERY_MS;
    }
    await sleep(200);
  }
}

/** Whether `next start` could listen on the port: it binds every address, as this check does. */
async function portIsFree(candidate: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => {
      resolve(false);
    });
    server.listen(candidate, () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}
