import { createServer } from "node:net";
import type { Cast } from "./cast.ts";
import { parseRecord, stepLine } from "./log-records.ts";
import type { Observer } from "./observer.ts";
import { waitFor, WaitTimeout } from "./waits.ts";

/**
 * The start and the end of the soak's processes. The start: the platform (once its port is known
 * to be free), the aux peer (once it has registered its address, as the demo waits), the peers.
 * The clean end: the peers stop gracefully (SIGINT: each finishes its round and leaves), the aux
 * posts the last steps, the last reads are taken, then the aux and the platform stop.
 */

const PEER_STOP_GRACE_MS = 60_000;
const SERVICE_STOP_GRACE_MS = 30_000;
const LAST_STEP_WAIT_MS = 90_000;

export async function startCast(cast: Cast, say: (line: string) => void, signal: AbortSignal): Promise<void> {
  const port = Number(new URL(cast.url).port);
  if (!(await portFree(port))) throw new Error(`port ${port} is in use; pick another with --port`);
  say(`starting the platform at ${cast.url}`);
  await cast.startPlatform(signal);
  say("starting the aux peer");
  try {
    await cast.startAux(signal);
  } catch (error) {
    if (!(error instanceof WaitTimeout)) throw error;
    say(`the aux peer has not registered its address (${error.message}); starting the peers anyway`);
  }
  say(`starting ${cast.peers.length} volunteer peers`);
  for (const peer of cast.peers) cast.startPeer(peer);
}

export interface WindDown {
  /** The swarm's last step as the peers logged it, and as the platform recorded it in the end. */
  readonly lastLoggedStep: number | null;
  readonly lastRecordedStep: number | null;
  readonly notes: readonly string[];
}

export async function windDown(
  cast: Cast,
  observer: Observer,
  say: (line: string) => void,
  signal: AbortSignal,
): Promise<WindDown> {
  const notes: string[] = [];
  say("stopping the peers (SIGINT: each finishes its averaging round and leaves)");
  await Promise.all(
    cast.peers.map((peer) => peer.stop("SIGINT", "end of the soak", PEER_STOP_GRACE_MS, [0])),
  );
  observer.pollLogs(Date.now(), true);
  const lastLoggedStep = lastLogged(cast);
  const recorded: { step: number | null } = { step: null };
  if (lastLoggedStep !== null) {
    say(`waiting for the platform to record step ${lastLoggedStep}, the peers' last`);
    try {
      await waitFor(
        `the aux to post step ${lastLoggedStep} to the platform`,
        async () => {
          const sample = await observer.sample();
          recorded.step = sample.lastStep ?? recorded.step;
          return sample.lastStep !== null && sample.lastStep >= lastLoggedStep ? true : undefined;
        },
        { timeoutMs: LAST_STEP_WAIT_MS, intervalMs: 2_000, signal },
      );
    } catch (error) {
      if (!(error instanceof WaitTimeout)) throw error;
      notes.push(`${error.message}: the platform's last recorded step is ${recorded.step ?? "none"}`);
      say(notes.at(-1) ?? "");
    }
  }
  // One more read a moment later: contributions come with the steps, and nothing should change now.
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const final = await observer.sample();
  if (final.error !== null) notes.push(`the last read of the platform failed: ${final.error}`);
  say("stopping the aux peer and the platform");
  await cast.aux.stop("SIGTERM", "end of the soak", SERVICE_STOP_GRACE_MS, [0]);
  await cast.platform.stop("SIGTERM", "end of the soak", SERVICE_STOP_GRACE_MS);
  observer.pollLogs(Date.now(), true);
  return { lastLoggedStep, lastRecordedStep: final.lastStep ?? recorded.step, notes };
}

/** Stops whatever still runs (after a failure or Ctrl-C): SIGTERM, then SIGKILL after a short grace. */
export async function stopEverything(cast: Cast): Promise<void> {
  await Promise.all(
    cast.processes
      .filter((process) => process.running)
      .map((process) => process.stop("SIGTERM", "the soak is ending", 10_000)),
  );
}

/** The highest step in the last incarnation of each peer. */
function lastLogged(cast: Cast): number | null {
  let highest: number | null = null;
  for (const peer of cast.peers) {
    for (const line of peer.current?.tail.lines ?? []) {
      const record = parseRecord(line.text);
      const step = record === null ? null : stepLine(record);
      if (step !== null) highest = Math.max(highest ?? 0, step.step);
    }
  }
  return highest;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => {
      resolve(false);
    });
    server.listen({ port }, () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}
