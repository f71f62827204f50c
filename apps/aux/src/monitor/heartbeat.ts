import type { RefusalLog } from "@barnraise/swarm";
import type { SwarmStatusBody } from "../platform-client.ts";
import type { ImplausibleRecords } from "./implausible-records.ts";
import type { SplitWatch } from "./split-watch.ts";
import type { StepAggregator } from "./step-aggregator.ts";

/** Refusals of the last minute go into each heartbeat, at most this many. */
const REFUSALS_WINDOW_MS = 60_000;
const MAX_REFUSALS = 256;
/** A refusal's code as the platform takes it (PASS_REVOKED …). */
const ERROR_CODE = /^[A-Z][A-Z0-9_]{0,63}$/;
/** Trainers listed in one heartbeat at most (the platform's limit). */
const MAX_TRAINERS = 2_000;

/**
 * The heartbeat the aux posts every few seconds: the swarm's liveness and throughput, which
 * trainers the swarm accepts and whether each averages, whose passes this aux refused and why, whose
 * progress records it refused as implausible and why, and whether the swarm has split. The platform shows each node's standing and the split from it.
 */
export function swarmHeartbeat(parts: {
  readonly aggregator: StepAggregator;
  readonly splits: SplitWatch;
  readonly refusals: RefusalLog;
  readonly implausible: ImplausibleRecords;
  readonly now: number;
}): SwarmStatusBody {
  const { aggregator, splits, refusals, implausible, now } = parts;
  const { alivePeers, samplesPerSecond } = aggregator.liveness();
  return {
    alivePeers,
    samplesPerSecond,
    step: aggregator.currentStep(),
    time: now,
    trainers: aggregator.trainers().slice(0, MAX_TRAINERS),
    refused: refusals
      .recent(REFUSALS_WINDOW_MS)
      // A pass of a replaced key is refreshed within seconds: nothing about the node's standing.
      .filter((refusal) => ERROR_CODE.test(refusal.code) && refusal.code !== "PASS_KEY_ROTATED")
      .slice(0, MAX_REFUSALS)
      .map((refusal) => ({
        peerId: refusal.peer,
        code: refusal.code,
        reason: refusal.reason,
        at: refusal.at,
      })),
    implausible: implausible.recent(REFUSALS_WINDOW_MS).slice(0, MAX_REFUSALS),
    split: splits.current(),
  };
}
