import { unrefTimer } from "./unref-timer.ts";

/**
 * Deadlines that do not count the time this process could not run.
 *
 * A volunteer's event loop stalls: a training step blocks it, a saturated CPU delays it. A plain
 * timer set before the stall fires as soon as the loop runs again, and Node runs due timers before
 * it reads the sockets, so a peer whose chunk arrived during the stall (it sits in the socket
 * buffer) is timed out for this process's own pause. A stall-aware timeout fires only once `ms` of
 * time the loop could run has passed: when it comes due, it subtracts the stalls measured since it
 * was set and, if that leaves time, waits for the rest (the sockets are read meanwhile).
 *
 * Stalls are measured by a ticker that runs only while such a timeout is pending: a tick that comes
 * more than STALL_TOLERANCE_MS late counts its lateness as stalled time.
 */

const TICK_MS = 50;
/** Lateness below this is ordinary timer jitter, not a stall. */
const STALL_TOLERANCE_MS = 20;
/**
 * However long the stalls, a timeout fires by this many times `ms` after it was set (a sender
 * deadline of 5 s waits out stalls of up to 45 s; 5 to 19 s were measured with 64 nodes on 2 cores).
 */
const MAX_STRETCH = 10;

let stalledMs = 0;
let pending = 0;
let ticker: NodeJS.Timeout | undefined;
let lastTick = 0;

function tick(): void {
  const now = performance.now();
  const late = now - lastTick - TICK_MS;
  if (late > STALL_TOLERANCE_MS) stalledMs += late;
  lastTick = now;
}

function hold(): void {
  if (pending++ > 0) return;
  lastTick = performance.now();
  ticker = setInterval(tick, TICK_MS);
  unrefTimer(ticker);
}

function release(): void {
  if (--pending > 0) return;
  clearInterval(ticker);
  ticker = undefined;
}

/** A pending stall-aware timeout; `clear` cancels it (safe to call more than once). */
export interface StallAwareTimeout {
  clear(): void;
}

/**
 * Calls `callback` once `ms` of time in which this process could run have passed. With `unref`,
 * the pending timeout does not keep the process alive (as `AbortSignal.timeout`'s does not).
 */
export function stallAwareTimeout(
  callback: () => void,
  ms: number,
  options: { unref?: boolean } = {},
): StallAwareTimeout {
  const setAt = performance.now();
  const stalledAtSet = stalledMs;
  let timer: NodeJS.Timeout | undefined;
  let done = false;
  const finish = (): void => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    release();
  };
  const check = (): void => {
    // The lateness of this very check is a stall the ticker may not have counted yet.
    tick();
    const elapsed = performance.now() - setAt;
    const left = ms - (elapsed - (stalledMs - stalledAtSet));
    const cap = MAX_STRETCH * ms - elapsed;
    if (left > 0 && cap > 0) {
      arm(Math.min(left, cap));
      return;
    }
    finish();
    callback();
  };
  const arm = (delayMs: number): void => {
    timer = setTimeout(check, delayMs);
    if (options.unref === true) unrefTimer(timer);
  };
  hold();
  arm(ms);
  return { clear: finish };
}

/**
 * The stall-aware counterpart of `AbortSignal.timeout(ms)`: aborts with a "TimeoutError"
 * DOMException once `ms` of time this process could run have passed; like it, it does not keep the
 * process alive.
 */
export function stallAwareSignal(ms: number): AbortSignal {
  const controller = new AbortController();
  stallAwareTimeout(
    () => {
      controller.abort(new DOMException(`The operation timed out after ${ms} ms.`, "TimeoutError"));
    },
    ms,
    { unref: true },
  );
  return controller.signal;
}
