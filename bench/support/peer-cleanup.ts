/**
 * Last-resort cleanup for the volunteer-peer benchmarks: child processes and temporary directories
 * they leave behind must go when the bench exits, fails or is interrupted (Ctrl-C), or a stray peer
 * keeps a core busy and skews the next measurement on the same machine.
 *
 * Cleanups are synchronous (kill a child, remove a directory) because the `exit` event runs no
 * asynchronous work. The normal path still stops children gracefully itself and then deregisters.
 */

const cleanups = new Set<() => void>();
let installed = false;

/** Runs `cleanup` when the process exits or gets SIGINT/SIGTERM/SIGHUP; returns the deregistration. */
export function onBenchExit(cleanup: () => void): () => void {
  install();
  cleanups.add(cleanup);
  return () => {
    cleanups.delete(cleanup);
  };
}

function runAll(): void {
  for (const cleanup of [...cleanups].reverse()) {
    try {
      cleanup();
    } catch {
      // the rest must still run; a child that is gone already is no failure
    }
  }
  cleanups.clear();
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on("exit", runAll);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      try {
        process.stderr.write(`\n${signal}: stopping the bench's child processes…\n`);
      } catch {
        // stderr may be a closed pipe; the cleanup runs either way
      }
      runAll();
      process.exit(signal === "SIGINT" ? 130 : 143);
    });
  }
}
