import type { ExperimentConfig } from "@barnraise/protocol";
import type { Batch } from "./batch.ts";
import type { TrainableModel } from "./trainable-model.ts";
import { syntheticBatch } from "../data/synthetic-batch.ts";
import { yieldToEvents } from "../yield-to-events.ts";

/**
 * Picks how many samples this peer puts in one minibatch (`training.localBatchSize: "auto"`). The
 * swarm only cares that peers together reach `targetBatchSize` samples per collaborative step, and
 * each peer accumulates gradients of its minibatches until then; so the local size is a private
 * trade-off: large enough that the device runs near its best samples per second, small enough that
 * a step fits in memory, keeps the process responsive, and does not overshoot the global batch.
 */

/** Why the search stopped where it did. */
export type BatchSizeLimit =
  /** A size's step took longer than the step budget. */
  | "time"
  /** The activation estimate of a larger size exceeds the memory budget. */
  | "memory"
  /** A larger size would overshoot the swarm's global batch by more than a quarter. */
  | "target"
  /** The `maxBatchSize` option. */
  | "max"
  /** Doubling the size no longer raised samples per second by 10 %. */
  | "throughput";

/** One batch size the search timed. */
export interface BatchSizeTrial {
  readonly batchSize: number;
  /** Median duration of the timed steps (after one untimed warm-up step). */
  readonly stepMs: number;
  readonly samplesPerSecond: number;
}

export interface BatchSizeChoice {
  readonly batchSize: number;
  /** Measured at `batchSize`. */
  readonly samplesPerSecond: number;
  /** Every size tried, smallest first. */
  readonly trials: readonly BatchSizeTrial[];
  readonly limitedBy: BatchSizeLimit;
}

export interface ChooseBatchSizeOptions {
  /** Timed with `computeGradients`, which leaves its parameters unchanged. */
  readonly model: TrainableModel;
  /** Samples the whole swarm accumulates per collaborative step. */
  readonly targetBatchSize: number;
  /** Bytes one step's activations may take (e.g. a share of the free memory); may be Infinity. */
  readonly memoryBytes: number;
  /** Longest acceptable step, in milliseconds (default 250), so the peer stays responsive. */
  readonly stepBudgetMs?: number;
  /** Largest size to try (default 1024). */
  readonly maxBatchSize?: number;
  /** Clock in milliseconds (default `performance.now`); tests inject a fake one. */
  readonly now?: () => number;
  /** Builds a batch of `size` samples (default: a synthetic batch shaped for the model). */
  readonly makeBatch?: (size: number) => Batch;
  /** Aborts the search between steps (e.g. on SIGINT); the promise rejects with the reason. */
  readonly signal?: AbortSignal;
}

export const DEFAULT_STEP_BUDGET_MS = 250;
export const DEFAULT_MAX_BATCH_SIZE = 1024;
/** The first size tried (or the cap, if smaller): below it, per-step overhead dominates everywhere. */
const FIRST_TRIAL_SIZE = 8;
/** Timed steps per size; their median resists one step slowed by garbage collection or another process. */
const TIMED_STEPS = 3;
/** Doubling must raise samples per second by this factor to be worth continuing. */
const MIN_SPEEDUP = 1.1;

/**
 * Times `computeGradients` at sizes 8, 16, 32… up to a cap, and returns the size with the best
 * samples per second among those whose step fits `stepBudgetMs` (the first size if none does).
 *
 * The cap is the smallest of `maxBatchSize`, a quarter of `targetBatchSize` (so one peer's last
 * minibatch overshoots the global batch by at most a quarter) and the sizes whose estimated
 * activations fit `memoryBytes`; it is at least 1. When the cap is not a power of two it is tried
 * itself as the last size. At each size one untimed warm-up step (kernel compilation, first
 * allocations) precedes the timed ones. The search stops at the cap, at the first size over the
 * budget, or when a size brings less than 10 % more samples per second than the one before.
 *
 * It yields to the event loop before every step, so signal handlers and timers still run.
 * Throws RangeError on invalid options.
 */
export async function chooseBatchSize(options: ChooseBatchSizeOptions): Promise<BatchSizeChoice> {
  const budgetMs = options.stepBudgetMs ?? DEFAULT_STEP_BUDGET_MS;
  if (!(budgetMs > 0 && Number.isFinite(budgetMs))) {
    throw new RangeError(`stepBudgetMs must be a positive number of milliseconds, got ${budgetMs}`);
  }
  const cap = batchSizeCap(options);
  const { model, signal } = options;
  const now = options.now ?? (() => performance.now());
  const makeBatch = options.makeBatch ?? ((size: number) => syntheticBatch(model.kind, size, size));

  const trials: BatchSizeTrial[] = [];
  let size = Math.min(FIRST_TRIAL_SIZE, cap.size);
  let limitedBy: BatchSizeLimit;
  for (;;) {
    const batch = makeBatch(size);
    const stepMs = await medianStepMs(model, batch, now, signal);
    const trial = { batchSize: size, stepMs, samplesPerSecond: (size * 1000) / stepMs };
    const previous = trials.at(-1);
    trials.push(trial);
    if (stepMs > budgetMs) {
      limitedBy = "time";
      break;
    }
    if (previous !== undefined && trial.samplesPerSecond < previous.samplesPerSecond * MIN_SPEEDUP) {
      limitedBy = "throughput";
      break;
    }
    if (size >= cap.size) {
      limitedBy = cap.limitedBy;
      break;
    }
    size = Math.min(size * 2, cap.size);
  }
  const best = fastestWithinBudget(trials, budgetMs);
  return { batchSize: best.batchSize, samplesPerSecond: best.samplesPerSecond, trials, limitedBy };
}

export interface ResolveBatchSizeOptions extends ChooseBatchSizeOptions {
  /** The local batch size asked for: the config's `training.localBatchSize`, or a command-line override. */
  readonly requested: ExperimentConfig["training"]["localBatchSize"];
}

/** The local batch size; the measurement fields are set only when it was measured ("auto"). */
export interface ResolvedBatchSize {
  readonly batchSize: number;
  readonly source: "requested" | "auto";
  readonly samplesPerSecond?: number;
  readonly limitedBy?: BatchSizeLimit;
  readonly trials?: readonly BatchSizeTrial[];
}

/**
 * The local batch size to train with: a requested number as given, except that it never exceeds
 * `targetBatchSize` (a larger minibatch would overshoot the whole swarm's step on its own), without
 * timing anything; for "auto", the choice of `chooseBatchSize`. Throws RangeError when a requested
 * number is not a positive integer.
 */
export async function resolveBatchSize(options: ResolveBatchSizeOptions): Promise<ResolvedBatchSize> {
  const { requested, targetBatchSize } = options;
  if (requested === "auto") {
    const choice = await chooseBatchSize(options);
    return { source: "auto", ...choice };
  }
  if (!Number.isSafeInteger(requested) || requested < 1) {
    throw new RangeError(`the local batch size must be a positive integer or "auto", got ${requested}`);
  }
  return { source: "requested", batchSize: Math.min(requested, targetBatchSize) };
}

/**
 * The largest size worth trying and which limit sets it; on a tie, memory is named first (the
 * hard limit), then the target, then `maxBatchSize`.
 */
function batchSizeCap(options: ChooseBatchSizeOptions): { size: number; limitedBy: BatchSizeLimit } {
  const { targetBatchSize, memoryBytes } = options;
  const maxBatchSize = options.maxBatchSize ?? DEFAULT_MAX_BATCH_SIZE;
  if (!Number.isSafeInteger(targetBatchSize) || targetBatchSize < 1) {
    throw new RangeError(`targetBatchSize must be a positive integer, got ${targetBatchSize}`);
  }
  if (!Number.isSafeInteger(maxBatchSize) || maxBatchSize < 1) {
    throw new RangeError(`maxBatchSize must be a positive integer, got ${maxBatchSize}`);
  }
  if (!(memoryBytes >= 0)) {
    throw new RangeError(`memoryBytes must be a non-negative number of bytes, got ${memoryBytes}`);
  }
  const limits: { size: number; limitedBy: BatchSizeLimit }[] = [
    {
      size: Math.floor(memoryBytes / options.model.kind.bytesPerSample),
      limitedBy: "memory",
    },
    { size: Math.floor(targetBatchSize / 4), limitedBy: "target" },
    { size: maxBatchSize, limitedBy: "max" },
  ];
  let cap = { size: Number.POSITIVE_INFINITY, limitedBy: "max" as BatchSizeLimit };
  for (const limit of limits) if (limit.size < cap.size) cap = limit;
  return { size: Math.max(1, cap.size), limitedBy: cap.limitedBy };
}

/** One untimed warm-up step, then the median of the timed ones, in milliseconds (never 0). */
async function medianStepMs(
  model: TrainableModel,
  batch: Batch,
  now: () => number,
  signal: AbortSignal | undefined,
): Promise<number> {
  const durations: number[] = [];
  for (let step = 0; step <= TIMED_STEPS; step++) {
    await yieldToEvents();
    signal?.throwIfAborted();
    const started = now();
    await model.computeGradients(batch, step);
    if (step > 0) durations.push(now() - started);
  }
  durations.sort((a, b) => a - b);
  // A coarse timer can read 0 for a fast step; keep the rate finite.
  return Math.max(durations[Math.floor(durations.length / 2)] ?? 0, 1e-3);
}

/** The trial with the most samples per second within the budget (the smaller on a tie), else the first. */
function fastestWithinBudget(trials: readonly BatchSizeTrial[], budgetMs: number): BatchSizeTrial {
  let best: BatchSizeTrial | undefined;
  for (const trial of trials) {
    if (trial.stepMs > budgetMs) continue;
    if (best === undefined || trial.samplesPerSecond > best.samplesPerSecond) best = trial;
  }
  const first = trials[0];
  if (best !== undefined) return best;
  if (first === undefined) throw new RangeError("no batch size was tried");
  return first;
}
