/**
 * Polling that a page can leave running: one request at a time, a pause while the page is hidden,
 * and a fresh poll as soon as it is shown again. Visibility and timers are injected so the schedule
 * can be tested without a browser.
 */

export interface Visibility {
  isHidden(): boolean;
  /** Calls `listener` whenever visibility changes; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
}

export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface PollerOptions {
  readonly intervalMs: number;
  /** One poll. Its failures are its own business: a rejection is swallowed and polling goes on. */
  readonly poll: (signal: AbortSignal) => Promise<void>;
  readonly visibility: Visibility;
  readonly timers?: Timers;
}

const globalTimers: Timers = {
  setTimeout: (callback, ms) => globalThis.setTimeout(callback, ms),
  clearTimeout: (handle) => {
    globalThis.clearTimeout(handle as ReturnType<typeof globalThis.setTimeout>);
  },
};

/**
 * Polls every `intervalMs` after the previous poll ends (the caller already shows fresh data, so
 * the first poll waits too). Returns `stop`, which also aborts a poll in flight.
 */
export function startPolling({
  intervalMs,
  poll,
  visibility,
  timers = globalTimers,
}: PollerOptions): () => void {
  let timer: unknown = null;
  let inFlight: AbortController | null = null;
  let stopped = false;

  const clear = () => {
    if (timer !== null) timers.clearTimeout(timer);
    timer = null;
  };
  const schedule = () => {
    clear();
    if (!stopped) timer = timers.setTimeout(run, intervalMs);
  };
  // The one place a poll starts. While the page is hidden the chain simply ends here; showing the
  // page starts it again.
  const run = () => {
    clear();
    if (stopped || inFlight !== null || visibility.isHidden()) return;
    const controller = new AbortController();
    inFlight = controller;
    void poll(controller.signal)
      .catch(() => undefined)
      .finally(() => {
        inFlight = null;
        schedule();
      });
  };

  const unsubscribe = visibility.subscribe(() => {
    if (!visibility.isHidden()) run();
  });
  schedule();

  return () => {
    stopped = true;
    clear();
    inFlight?.abort();
    unsubscribe();
  };
}

/** The browser page's visibility (`document.hidden` and `visibilitychange`). */
export function documentVisibility(): Visibility {
  return {
    isHidden: () => document.hidden,
    subscribe: (listener) => {
      document.addEventListener("visibilitychange", listener);
      return () => {
        document.removeEventListener("visibilitychange", listener);
      };
    },
  };
}
