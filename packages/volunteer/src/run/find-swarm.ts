import { abortableSleep, joinPlatform, type NodeSession, type Swarm } from "@barnraise/swarm";
import { formatMbit } from "../status/units.ts";
import type { Reporter } from "../status/peer-status.ts";
import type { VolunteerOptions } from "./volunteer-options.ts";

/** How often a peer measures its link against an aux peer, and how soon after a failure. */
const LINK_PROBE_EVERY_MS = 10 * 60_000;
const LINK_PROBE_RETRY_MS = 30_000;
/** How long a joining peer waits to hear from the swarm before it trains on its own. */
const DISCOVERY_TIMEOUT_MS = 15_000;
/** While alone, ask the platform for the aux peers' addresses after this long, doubling up to the next. */
const FIRST_REDISCOVERY_MS = 2_000;
const MAX_REDISCOVERY_MS = 20_000;

/** The peer's search for the swarm, running until `stop`. */
export interface SwarmSearch {
  /** Whether the platform listed any aux peer when last asked. */
  readonly auxListed: () => boolean;
  readonly stop: () => void;
  /** Aborted by `stop`. */
  readonly signal: AbortSignal;
}

/**
 * Keeps the peer in touch with the swarm and waits (at most DISCOVERY_TIMEOUT_MS) to hear from it.
 * A peer that found nobody (it started before the organizer's aux peer registered, or was handed
 * the address of an aux that has since restarted elsewhere) asks the platform again for the aux
 * peers' addresses while it is alone: within seconds at first, then less often. So does a peer in
 * a swarm that lost touch with every aux peer the platform lists (an aux restarted on another
 * port): the aux keeps the run's state, its metrics and its checkpoints. The link's capacity, which
 * sets this peer's share of each all-reduce, is measured against an aux peer now and every 10
 * minutes; the all-reduce's own traffic refines it in between.
 */
export async function findSwarm(session: NodeSession, options: VolunteerOptions): Promise<SwarmSearch> {
  const { swarm, joined } = session;
  const { reporter, abortSignal } = options;
  const looking = new AbortController();
  const signal = AbortSignal.any([looking.signal, abortSignal]);
  let auxListed = joined.initialPeers.length > 0;
  void lookForPeers(
    () => {
      const members = swarm.node.members();
      return members.length > 0 && (!auxListed || members.some((peer) => swarm.node.modeOf(peer) === "aux"));
    },
    async () => {
      const listed = await rediscover(session, options);
      if (listed !== undefined) auxListed = listed > 0;
    },
    signal,
  );
  void measureLinkNow(swarm, reporter, signal);
  if (joined.initialPeers.length + options.peers.length > 0) {
    const heard = await waitForSwarm(swarm, options.stopSignal, abortSignal);
    if (!heard && !options.stopSignal.aborted) {
      reporter.log(
        "warn",
        `no peer answered within ${DISCOVERY_TIMEOUT_MS / 1000} s; training on our own until one does`,
      );
    }
  }
  return {
    auxListed: () => auxListed,
    stop: () => {
      looking.abort();
    },
    signal: looking.signal,
  };
}

/**
 * Joins again (one attempt) for the current initial peers and dials them; failures are only logged.
 * Resolves with how many the platform listed, or undefined when it could not be asked.
 */
async function rediscover(session: NodeSession, options: VolunteerOptions): Promise<number | undefined> {
  const { swarm, joined, identity } = session;
  const { reporter } = options;
  const keyPair = identity.keyPair;
  try {
    const fresh = await joinPlatform({
      server: options.server,
      credential: options.credential,
      keyPair,
      experimentId: joined.experiment.id,
      pinnedAuthority: swarm.node.authority.publicKey,
    });
    swarm.node.authority.followJoin(fresh);
    const results = await Promise.allSettled(
      fresh.initialPeers.map((address) => swarm.node.connect(address)),
    );
    const reached = results.filter((result) => result.status === "fulfilled").length;
    if (reached > 0) reporter.log("info", `found the swarm through ${reached} aux peer(s)`);
    return fresh.initialPeers.length;
  } catch (error) {
    reporter.log("warn", "could not ask the platform for peers", { err: error });
    return undefined;
  }
}

/**
 * Calls `rediscover` while `connected()` is false: 2 s after the start or after losing the last
 * member, then at doubling intervals up to 20 s. Ends when `signal` aborts.
 */
async function lookForPeers(
  connected: () => boolean,
  rediscover: () => Promise<void>,
  signal: AbortSignal,
): Promise<void> {
  let delayMs = FIRST_REDISCOVERY_MS;
  while (!signal.aborted) {
    try {
      await abortableSleep(connected() ? FIRST_REDISCOVERY_MS : delayMs, signal);
    } catch {
      return;
    }
    if (connected()) {
      delayMs = FIRST_REDISCOVERY_MS;
      continue;
    }
    await rediscover();
    delayMs = Math.min(delayMs * 2, MAX_REDISCOVERY_MS);
  }
}

/**
 * Measures the link against an aux member (the first one connected, waiting for one), logs the
 * result, and does it again every LINK_PROBE_EVERY_MS; a failed probe is tried again after
 * LINK_PROBE_RETRY_MS. Ends when `signal` aborts.
 */
async function measureLinkNow(swarm: Swarm, reporter: Reporter, signal: AbortSignal): Promise<void> {
  for (;;) {
    const aux = swarm.node.members().find((peer) => swarm.node.modeOf(peer) === "aux");
    let waitMs = LINK_PROBE_RETRY_MS;
    if (aux !== undefined) {
      try {
        const link = await swarm.measureLink(aux, signal);
        reporter.log(
          "info",
          `link: ${formatMbit(link.uploadBytesPerSecond)} up, ${formatMbit(link.downloadBytesPerSecond)} down (a speed test against an aux peer)`,
          { ...link, aux },
        );
        waitMs = LINK_PROBE_EVERY_MS;
      } catch (error) {
        if (signal.aborted) return;
        reporter.logger.debug({ err: error, aux }, "the link speed test failed; trying again");
      }
    }
    try {
      await abortableSleep(aux === undefined ? FIRST_REDISCOVERY_MS : waitMs, signal);
    } catch {
      return;
    }
  }
}

/**
 * Waits until some peer's progress arrives (so the first step can load the swarm's state instead
 * of starting from scratch) or DISCOVERY_TIMEOUT_MS passes.
 */
async function waitForSwarm(swarm: Swarm, stop: AbortSignal, abort: AbortSignal): Promise<boolean> {
  const deadline = Date.now() + DISCOVERY_TIMEOUT_MS;
  while (swarm.progress.records().length === 0) {
    if (Date.now() >= deadline || stop.aborted) return false;
    await abortableSleep(100, abort);
  }
  return true;
}
