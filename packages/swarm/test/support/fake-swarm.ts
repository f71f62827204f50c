import { SwarmError, SwarmErrorCode } from "../../src/errors.ts";
import type {
  AveragedVector,
  AverageOptions,
  AveragerPort,
  EpochProgressView,
  EpochState,
  GlobalProgressView,
  LocalProgressReport,
  ProgressPort,
  StatePort,
} from "../../src/optim/ports.ts";

// ---- Fakes: one in-process "swarm" that all peers share.

interface Contribution {
  readonly peer: number;
  readonly vector: Float32Array;
  readonly weight: number;
  readonly resolve: (result: AveragedVector) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Progress: global() is the highest reported epoch and the samples reported for it. Averaging: a
 * barrier that, once `groupSize` peers contributed for an epoch, computes the exact weighted mean in
 * float64 in peer order — at once, or when the test calls `release()` if `manual` is set.
 */
export class FakeSwarm {
  readonly reports = new Map<number, LocalProgressReport>();
  readonly rounds = new Map<number, Contribution[]>();
  /** Rounds to fail before averaging succeeds again. */
  failures = 0;
  manual = false;
  readonly groupSize: number;
  readonly targetBatchSize: number;
  constructor(groupSize: number, targetBatchSize: number) {
    this.groupSize = groupSize;
    this.targetBatchSize = targetBatchSize;
  }

  progress(peer: number): ProgressPort {
    return {
      report: (progress) => this.reports.set(peer, progress),
      global: (): GlobalProgressView => {
        const epochs = [...this.reports.values()].map((report) => report.epoch);
        return this.#view(Math.max(0, ...epochs));
      },
      at: (epoch) => this.#view(epoch),
    };
  }

  #view(epoch: number): EpochProgressView {
    const at = [...this.reports.values()].filter((report) => report.epoch === epoch);
    const samplesAccumulated = at.reduce((sum, report) => sum + report.samplesAccumulated, 0);
    return {
      epoch,
      samplesAccumulated,
      targetBatchSize: this.targetBatchSize,
      etaSeconds: 0,
      peersAtEpoch: at.length,
    };
  }

  /**
   * A lossy codec every contribution goes through (as the all-reduce's would); with `residual` asked
   * for, the peer gets back what it lost. Default: lossless.
   */
  codec: ((vector: Float32Array) => Float32Array) | undefined;
  /** Every residual handed back, per peer, in order. */
  readonly residuals = new Map<number, Float32Array[]>();

  averager(peer: number): AveragerPort {
    return {
      average: (epoch, vector, weight, _signal, options?: AverageOptions) =>
        new Promise((resolve, reject) => {
          const round = this.rounds.get(epoch) ?? [];
          this.rounds.set(epoch, round);
          const sent = this.codec === undefined ? vector.slice() : this.codec(vector);
          if (options?.residual !== undefined) {
            for (let i = 0; i < vector.length; i++) options.residual[i] = (vector[i] ?? 0) - (sent[i] ?? 0);
            const list = this.residuals.get(peer) ?? [];
            list.push(options.residual);
            this.residuals.set(peer, list);
          }
          round.push({ peer, vector: sent, weight, resolve, reject });
          if (!this.manual && round.length === this.groupSize) this.release(epoch);
        }),
    };
  }

  release(epoch: number): void {
    const round = (this.rounds.get(epoch) ?? []).sort((a, b) => a.peer - b.peer);
    this.rounds.delete(epoch);
    if (this.failures > 0) {
      this.failures -= 1;
      for (const c of round) c.reject(new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, "a reducer left"));
      return;
    }
    const totalWeight = round.reduce((sum, c) => sum + c.weight, 0);
    const size = round[0]?.vector.length ?? 0;
    const mean = new Float32Array(size);
    for (let i = 0; i < size; i++) {
      let sum = 0;
      for (const c of round) sum += (c.vector[i] ?? 0) * c.weight;
      mean[i] = sum / totalWeight;
    }
    for (const c of round) c.resolve({ vector: mean.slice(), groupSize: round.length, totalWeight });
  }
}

export class FakeState implements StatePort {
  donor: EpochState | null = null;
  /** Hand the donor's state over even when it is not ahead (a confused or lying donor). */
  careless = false;
  readonly calls: number[] = [];
  readonly generations: number[] = [];
  loadNewer(epoch: number, generation: number): Promise<EpochState | null> {
    this.calls.push(epoch);
    this.generations.push(generation);
    const ahead = this.donor !== null && (this.careless || this.donor.epoch > epoch);
    return Promise.resolve(ahead ? this.donor : null);
  }
}
