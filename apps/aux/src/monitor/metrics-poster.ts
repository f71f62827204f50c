import type { Logger } from "pino";
import { describeError } from "../describe-error.ts";
import { PlatformRequestError, type AuxPlatformClient } from "../platform-client.ts";
import type { ResumeWatch } from "./resume-watch.ts";
import type { AggregatedStep } from "./step-aggregator.ts";

/** Aggregated steps waiting for the platform; the oldest are dropped beyond this. */
const MAX_QUEUED_STEPS = 200;
/** Wait after the platform failed to take metrics. */
const METRICS_RETRY_MS = 5_000;

export interface MetricsPosterOptions {
  readonly client: AuxPlatformClient;
  readonly logger: Logger;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
  /** Told what the platform stored and what it had recorded already. */
  readonly resume: ResumeWatch;
}

/**
 * Posts the aggregated steps to the platform in order. A step the platform had recorded already
 * (this aux restarted, or the swarm resumed behind the recorded steps) is kept aside, to be posted
 * again if the swarm turns out to have resumed (`resumeFrom`); one it refuses for good is dropped;
 * on any other failure the queue waits METRICS_RETRY_MS.
 */
export class MetricsPoster {
  readonly #options: MetricsPosterOptions;
  readonly #queue: AggregatedStep[] = [];
  readonly #unstored: AggregatedStep[] = [];
  #retryAt = 0;
  #lastPostedStep: number | undefined;

  constructor(options: MetricsPosterOptions) {
    this.#options = options;
  }

  /** The last step the platform recorded, as far as this aux knows; undefined after a reset. */
  get lastPostedStep(): number | undefined {
    return this.#lastPostedStep;
  }

  /** Queues steps to post. */
  add(steps: readonly AggregatedStep[]): void {
    this.#queue.push(...steps);
    if (this.#queue.length > MAX_QUEUED_STEPS) this.#queue.splice(0, this.#queue.length - MAX_QUEUED_STEPS);
  }

  /** The swarm went on from `fromStep`: the steps after it that were recorded already go again. */
  resumeFrom(fromStep: number): void {
    this.#queue.unshift(...this.#unstored.splice(0).filter((kept) => kept.step > fromStep));
    this.#lastPostedStep = undefined;
  }

  /** The run was rolled back: what was posted is of another generation. */
  forgetPosted(): void {
    this.#lastPostedStep = undefined;
  }

  /** Posts the queued steps, oldest first, until one fails or the aux stops. */
  async post(now: number, signal: AbortSignal): Promise<void> {
    const { client, logger, generation, resume } = this.#options;
    // A call, so that the compiler does not assume the signal unchanged across awaits.
    const stopped = () => signal.aborted;
    while (this.#queue.length > 0 && now >= this.#retryAt && !stopped()) {
      const step = this.#queue[0];
      if (step === undefined) break;
      try {
        const ingested = await client.postMetrics({ ...step, generation: generation() }, signal);
        this.#queue.shift();
        if (!ingested.stored) {
          // Recorded before: this aux restarted, or the swarm resumed behind the recorded steps.
          this.#lastPostedStep = Math.max(this.#lastPostedStep ?? 0, ingested.lastStep ?? 0);
          resume.refused(step.step);
          this.#unstored.push(step);
          if (this.#unstored.length > MAX_QUEUED_STEPS) this.#unstored.shift();
          continue;
        }
        this.#lastPostedStep = step.step;
        this.#unstored.length = 0;
        resume.stored();
        logger.info(
          {
            step: step.step,
            loss: step.loss,
            alivePeers: step.alivePeers,
            samplesPerSecond: step.samplesPerSecond,
            ...(step.bytesPerPeer === undefined ? {} : { bytesPerPeer: Math.round(step.bytesPerPeer) }),
            ...(step.utilization === undefined ? {} : { utilization: step.utilization }),
            ...(step.samples === undefined ? {} : { samples: step.samples }),
          },
          "metrics posted",
        );
      } catch (error) {
        if (stopped()) return;
        if (error instanceof PlatformRequestError && !error.retryable) {
          this.#queue.shift();
          logger.warn(
            { step: step.step, code: error.code },
            `the platform refused step ${step.step}: ${error.message}`,
          );
        } else {
          this.#retryAt = Date.now() + METRICS_RETRY_MS;
          logger.warn({ step: step.step }, `could not post metrics: ${describeError(error)}; retrying`);
        }
      }
    }
  }
}
