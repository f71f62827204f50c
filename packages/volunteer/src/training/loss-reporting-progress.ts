import type {
  EpochProgressView,
  GlobalProgress,
  LocalProgress,
  LocalProgressReport,
  ProgressPort,
} from "@barnraise/swarm";

/** The slice of the swarm's progress tracker this port wraps. */
export interface ProgressSink {
  report(progress: LocalProgress): void;
  global(): GlobalProgress;
  globalBefore?(agoMs: number): GlobalProgress;
  at(epoch: number): EpochProgressView;
  sharedStates?(epoch: number): ReadonlyMap<string, readonly string[]>;
}

/** One epoch's totals on this peer. */
interface EpochLoss {
  lossSum: number;
  minibatches: number;
  computeSeconds: number;
  /** When this peer first reported the epoch (ms), and how long it stayed in it once it moved on. */
  startedAt?: number;
  wallSeconds?: number;
}

/**
 * The optimizer's progress port, with this peer's metrics added to every record it publishes: the
 * sum of minibatch losses and the minibatch count of the epoch being reported (and the final totals
 * of the epoch before), so the aux monitor can compute loss = Σ lossSum / Σ minibatches over the
 * swarm (DeDLOC I.2), and for the leaderboard the session's compute time and the samples it put into
 * collaborative steps.
 *
 * Per epoch it also keeps, for the dashboard's utilization, the seconds spent computing and the wall
 * seconds spent in the epoch; they travel in `previous`. The bytes sent in the latest finished
 * all-reduce travel in `round`, for the dashboard's traffic.
 *
 * Losses are kept per epoch because the optimizer may report another epoch than the one the last
 * minibatch belonged to: a delayed round moves on to the next epoch at once, and a failed round
 * moves back (its gradients, and so its losses, rejoin the epoch).
 */
export class LossReportingProgress implements ProgressPort {
  readonly #sink: ProgressSink;
  readonly #losses = new Map<number, EpochLoss>();
  #samplesTotal = 0;
  #computeSeconds = 0;
  #last: LocalProgressReport | undefined;
  #round: { epoch: number; bytesSent: number } | undefined;
  readonly #now: () => number;
  /** The sink's look back (`ProgressPort.globalBefore`), where it has one. */
  readonly globalBefore?: (agoMs: number) => GlobalProgress;

  /** `now`: a monotonic clock in ms for the epochs' wall time; default `performance.now`. */
  constructor(sink: ProgressSink, now: () => number = () => performance.now()) {
    this.#sink = sink;
    this.#now = now;
    if (sink.globalBefore !== undefined)
      this.globalBefore = (agoMs) => sink.globalBefore?.(agoMs) ?? sink.global();
  }

  #entry(epoch: number): EpochLoss {
    let entry = this.#losses.get(epoch);
    if (entry === undefined) {
      entry = { lossSum: 0, minibatches: 0, computeSeconds: 0 };
      this.#losses.set(epoch, entry);
    }
    return entry;
  }

  /** Records one minibatch's mean loss for `epoch`; published with the next report of that epoch. */
  addLoss(epoch: number, loss: number): void {
    if (!Number.isFinite(loss) || loss < 0) return; // the record schema allows finite losses ≥ 0 only
    const entry = this.#entry(epoch);
    entry.lossSum += loss;
    entry.minibatches += 1;
  }

  /** Counts one minibatch's compute time for `epoch` and into the cumulative total of every record. */
  addWork(computeSeconds: number, epoch: number): void {
    if (!(Number.isFinite(computeSeconds) && computeSeconds > 0)) return;
    this.#computeSeconds += computeSeconds;
    this.#entry(epoch).computeSeconds += computeSeconds;
  }

  /** The all-reduce that ended `epoch` is over: this peer sent `bytesSent` bytes in it. */
  addRound(epoch: number, bytesSent: number): void {
    if (!(Number.isSafeInteger(bytesSent) && bytesSent >= 0 && Number.isSafeInteger(epoch) && epoch >= 0)) {
      return;
    }
    this.#round = { epoch, bytesSent };
    if (this.#last !== undefined) this.report(this.#last);
  }

  /**
   * Counts samples that went into a collaborative step (the swarm's model) into the cumulative
   * total of every record: the leaderboard credits these, not every sample computed.
   */
  addContributed(samples: number): void {
    if (!(Number.isFinite(samples) && samples > 0)) return;
    this.#samplesTotal += samples;
    // The step was reported before its outcome was known: publish the new total now.
    if (this.#last !== undefined) this.report(this.#last);
  }

  /** The mean minibatch loss recorded for `epoch`, or undefined when none was. */
  meanLoss(epoch: number): number | undefined {
    const entry = this.#losses.get(epoch);
    return entry === undefined || entry.minibatches === 0 ? undefined : entry.lossSum / entry.minibatches;
  }

  report(progress: LocalProgressReport): void {
    this.#last = progress;
    // Epochs two or more behind can no longer be reported (a failed round moves back by one only).
    // …and epochs ahead are from before a rollback: their minibatches trained other parameters.
    for (const epoch of this.#losses.keys()) {
      if (epoch < progress.epoch - 1 || epoch > progress.epoch + 1) this.#losses.delete(epoch);
    }
    const now = this.#now();
    const entry = this.#entry(progress.epoch);
    entry.startedAt ??= now;
    const previous = this.#losses.get(progress.epoch - 1);
    if (previous?.startedAt !== undefined && previous.wallSeconds === undefined) {
      previous.wallSeconds = Math.max(0, now - previous.startedAt) / 1000;
    }
    this.#sink.report({
      ...progress,
      lossSum: entry.lossSum,
      minibatches: entry.minibatches,
      samplesTotal: this.#samplesTotal,
      computeSeconds: this.#computeSeconds,
      ...(previous === undefined ? {} : { previous: previousTotals(progress.epoch - 1, previous) }),
      ...(this.#round === undefined ? {} : { round: this.#round }),
    });
  }

  global(): GlobalProgress {
    return this.#sink.global();
  }

  at(epoch: number): EpochProgressView {
    return this.#sink.at(epoch);
  }

  sharedStates(epoch: number): ReadonlyMap<string, readonly string[]> {
    return this.#sink.sharedStates?.(epoch) ?? new Map();
  }
}

function previousTotals(epoch: number, totals: EpochLoss): NonNullable<LocalProgress["previous"]> {
  return {
    epoch,
    lossSum: totals.lossSum,
    minibatches: totals.minibatches,
    computeSeconds: totals.computeSeconds,
    ...(totals.wallSeconds === undefined ? {} : { wallSeconds: totals.wallSeconds }),
  };
}
