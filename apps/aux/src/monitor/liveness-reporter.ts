import type { Swarm } from "@barnraise/swarm";
import type { Logger } from "pino";
import type { BackgroundTasks } from "../background-tasks.ts";
import type { AuxPlatformClient } from "../platform-client.ts";
import { swarmHeartbeat } from "./heartbeat.ts";
import type { ImplausibleRecords } from "./implausible-records.ts";
import type { SplitWatch } from "./split-watch.ts";
import type { StepAggregator } from "./step-aggregator.ts";

/** How often the swarm's liveness goes to the platform (the page says "0 alive" within 30 s). */
const LIVENESS_EVERY_MS = 5_000;

export interface LivenessReporterOptions {
  readonly swarm: Swarm;
  readonly client: AuxPlatformClient;
  readonly aggregator: StepAggregator;
  readonly splits: SplitWatch;
  readonly implausible: ImplausibleRecords;
  readonly logger: Logger;
}

/**
 * What the aux sees of the swarm's life: its step, throughput and peers on the aux's metrics at
 * every tick, and every LIVENESS_EVERY_MS a heartbeat to the platform (alive trainers, a split of
 * the swarm into several models, refused peers and records), logging when a split starts and ends.
 */
export class LivenessReporter {
  readonly #options: LivenessReporterOptions;
  #reportedAt = 0;
  #splitSince: number | undefined;

  constructor(options: LivenessReporterOptions) {
    this.#options = options;
  }

  tick(now: number, signal: AbortSignal, background: BackgroundTasks): void {
    const { swarm, client, aggregator, splits, implausible, logger } = this.#options;
    const liveness = aggregator.liveness();
    swarm.metrics.step.set(aggregator.currentStep());
    swarm.metrics.samplesPerSecond.set(liveness.samplesPerSecond);
    swarm.metrics.peersOnline.set(liveness.alivePeers);
    if (now - this.#reportedAt < LIVENESS_EVERY_MS) return;
    this.#reportedAt = now;
    const heartbeat = swarmHeartbeat({
      aggregator,
      splits,
      refusals: swarm.node.refusedPeers,
      implausible,
      now,
    });
    if ((heartbeat.split === null) !== (this.#splitSince === undefined)) {
      this.#splitSince = heartbeat.split?.since;
      if (heartbeat.split === null) logger.info("the swarm trains one model again");
      else logger.warn({ split: heartbeat.split }, `the swarm has split: ${heartbeat.split.summary}`);
    }
    background.run(client.postSwarmStatus(heartbeat, signal));
  }
}
