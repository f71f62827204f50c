// Waits until a Barnraise platform answers `GET <url>/api/v1/health` with 200, for at most a deadline,
// and says every 10 s what it is still waiting for and what the last try got. Each try has a deadline
// of its own: a server that accepts the connection and never answers (a stopped process holding the
// port) would otherwise hold a bare `fetch` for undici's 300 s header timeout. With --pid it stops
// waiting as soon as that process (the platform's) has exited.
//
//   node scripts/wait-for-health.ts --url http://localhost:3000 [--within 120] [--pid PID]
//
// Exits 0 once it answers; 1 when the deadline passes first; 2 when PID exits first.
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { isRunning } from "./process-table.ts";

const TRY_TIMEOUT_MS = 5_000;
const TRY_EVERY_MS = 500;
const NOTE_EVERY_MS = 10_000;

const { values } = parseArgs({
  options: { url: { type: "string" }, within: { type: "string", default: "120" }, pid: { type: "string" } },
});
const withinSeconds = Number(values.within);
const pid = values.pid === undefined ? undefined : Number(values.pid);
if (values.url === undefined || !(withinSeconds > 0) || (pid !== undefined && !Number.isInteger(pid))) {
  console.error("usage: node scripts/wait-for-health.ts --url URL [--within SECONDS] [--pid PID]");
  process.exit(64);
}
const health = `${values.url}/api/v1/health`;
const log = (line: string) => {
  console.error(`[barnraise] ${line}`);
};

/** One try: undefined when it answered 200, else what it got. */
async function tryOnce(): Promise<string | undefined> {
  try {
    const response = await fetch(health, { signal: AbortSignal.timeout(TRY_TIMEOUT_MS) });
    await response.body?.cancel();
    return response.ok ? undefined : `HTTP ${response.status}`;
  } catch (error) {
    if (error instanceof DOMException && error.name === "TimeoutError") {
      return `connected, but no answer within ${TRY_TIMEOUT_MS / 1000} s`;
    }
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return cause?.code ?? cause?.message ?? String(error);
  }
}

const started = Date.now();
let noteAt = started + NOTE_EVERY_MS;
for (;;) {
  const last = await tryOnce();
  if (last === undefined) process.exit(0);
  const now = Date.now();
  if (pid !== undefined && !isRunning(pid)) {
    log(`the platform exited before it answered at ${health}`);
    process.exit(2);
  }
  if (now - started >= withinSeconds * 1000) {
    log(`the platform did not answer at ${health} within ${withinSeconds} s (last try: ${last})`);
    process.exit(1);
  }
  if (now >= noteAt) {
    const waited = Math.round((now - started) / 1000);
    log(
      `still waiting for the platform to answer at ${health} (${waited} s of ${withinSeconds} s; last try: ${last})`,
    );
    noteAt += NOTE_EVERY_MS;
  }
  await sleep(TRY_EVERY_MS);
}
