import type { Logger } from "pino";
import { describeError } from "../describe-error.ts";
import type { AuxPlatformClient } from "../platform-client.ts";
import type { ResumeWatch } from "./resume-watch.ts";
import type { StepAggregator } from "./step-aggregator.ts";

export interface ResumeReporterOptions {
  readonly client: AuxPlatformClient;
  readonly logger: Logger;
  readonly watch: ResumeWatch;
  readonly aggregator: StepAggregator;
  /** The last step the platform recorded, as far as this aux knows. */
  readonly lastPostedStep: () => number | undefined;
  /** The step of the state this aux serves, if any. */
  readonly heldStep: () => number | undefined;
  /** Told once the platform knows: everything this aux counted after `fromStep` is to be counted again. */
  readonly onResumed: (fromStep: number) => void;
}

/**
 * Tells the platform when every live trainer is behind the recorded steps, i.e. the swarm resumed
 * from an older state (see `ResumeWatch`): the platform goes on with a new timeline of the curve.
 */
export class ResumeReporter {
  readonly #options: ResumeReporterOptions;

  constructor(options: ResumeReporterOptions) {
    this.#options = options;
  }

  async tick(now: number, signal: AbortSignal): Promise<void> {
    const { client, logger, watch, aggregator } = this.#options;
    const fromStep = watch.check(
      now,
      aggregator.liveness().alivePeers,
      aggregator.currentStep(),
      this.#options.lastPostedStep(),
      this.#options.heldStep(),
    );
    if (fromStep === undefined) return;
    try {
      const answer = await client.reportResume(fromStep, signal);
      if (answer.forked) {
        logger.warn(
          { fromStep, lastStep: answer.lastStep, timeline: answer.timeline },
          `the swarm resumed from step ${fromStep}, behind the recorded steps; the curve goes on from there`,
        );
      }
      this.#options.onResumed(fromStep);
    } catch (error) {
      if (signal.aborted) return;
      logger.warn({ err: error }, `could not report the resume: ${describeError(error)}`);
    }
  }
}
