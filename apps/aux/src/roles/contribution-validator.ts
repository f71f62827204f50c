import type { ContributionStepScale, ObservedContribution } from "@barnraise/swarm";
import type { Logger } from "pino";
import type { HeldOutScorer } from "./checkpoint-evaluator.ts";

/** What the validator uses of a scorer: the loss on a fixed subset of the test split. */
export type LossScorer = Pick<HeldOutScorer, "loss" | "dispose">;

/** The parameters the validator steps from: the aux's newest state. */
export interface ValidationParameters {
  /** The state's step (collaborative epoch) and rollback generation. */
  readonly step: number;
  readonly generation: number;
  readonly parameters: Float32Array;
}

/** What the validator tells the platform about a peer whose contributions hurt. */
export interface ContributionFlag {
  readonly peerId: string;
  /** The epoch and run generation of the round whose contribution hurt last. */
  readonly epoch: number;
  readonly generation: number;
  /** The earliest epoch among the peer's recent samples that hurt. */
  readonly firstHurtEpoch: number;
  /** The held-out loss (on the validator's subset) at θ, and after the peer's step; null: not finite. */
  readonly baselineLoss: number;
  readonly lossAfter: number | null;
  /** The median change of loss the round's sampled senders' steps caused. */
  readonly medianDelta: number;
  /** ‖g_peer‖ / median ‖g_j‖ over the round's sampled senders. */
  readonly normRatio: number;
  /** How many of the peer's last `recentSamples` scored samples hurt. */
  readonly hurtSamples: number;
  readonly recentSamples: number;
}

/** What the validator needs from the aux (ports; tests fake them). */
export interface ContributionValidatorPorts {
  /** The aux's newest parameters (its latest checkpoint), or null while it holds none. */
  parameters(): ValidationParameters | null;
  /** The run generation the aux is in now: rounds are scored only against a state of theirs. */
  generation(): number;
  /** A handle on the held-out scorer (shared with the checkpoint evaluator); disposed at `close`. */
  openScorer(signal: AbortSignal): Promise<LossScorer>;
  /** Records the flag with the platform. */
  report(flag: ContributionFlag, signal: AbortSignal): Promise<void>;
}

export interface ContributionValidatorOptions extends ContributionValidatorPorts {
  readonly logger: Logger;
  /** The aux's stop: cuts the scoring in flight short and starts no other. */
  readonly signal: AbortSignal;
  /**
   * The scale s of each sender's step θ − s·g_i, from the part's length and the median ℓ2 norm of
   * the round's sampled contributions: `contributionStepScale` of the run's strategy, which knows
   * how far its averaged vectors move θ. The step is shortened while the median one does not
   * descend (MAX_STEP_SHRINKS).
   */
  readonly stepScale: ContributionStepScale;
  /** Batches of the test split each loss is measured on (a fixed subset, the same every time). */
  readonly batches: number;
  /** Senders scored per round at most (a random sample of them); default 8. */
  readonly maxSendersPerRound?: number;
  /** How long after a report a still-flagged peer is reported again with newer evidence; default 30 s. */
  readonly reportEveryMs?: number;
  /**
   * How often the validator says at info what became of the rounds it was given (judged, or why
   * not), so that an organizer can tell a validator at work from one that never judges; default 60 s.
   */
  readonly summaryEveryMs?: number;
  readonly now?: () => number;
  readonly random?: () => number;
}

/** Fewer senders than this in a round and the median is no honest reference: the round is not scored. */
export const MIN_SENDERS = 3;
/**
 * A contribution hurts when its change of loss exceeds the median sender's by this share of the
 * loss… Measured on mnist-mlp with single 64-sample minibatch gradients as contributions (noisier
 * than a round's, which average many): over 420 honest samples the largest excess was 20 % of the
 * loss, while gradients ×1,000 or ×−1,000 exceeded it every time (by 4 times the loss at the
 * least) and ×−20 four times in five.
 */
export const RELATIVE_TOLERANCE = 0.3;
/**
 * …or, when that is less, by this many times the round's median absolute change of loss. A share of
 * the loss is no yardstick once the model is far from any minimum: after rounds the validator did
 * not see (an attacker paired with one honest peer before the aux joined), mnist-mlp's held-out
 * loss was 373 and later 72,730, honest steps changed it by −0.02 and −0.2, and a sign-flipped
 * gradient ×1,000 raised it by 34 and 294, far below 30 % of the loss: the validator judged every
 * round for minutes and flagged no one. Honest steps move the loss by comparable amounts, so 50
 * times the typical change still leaves honest noise alone.
 */
export const TYPICAL_CHANGE_TOLERANCE = 50;
/** …and in any case by this many median absolute deviations of the round's changes of loss. */
export const MAD_TOLERANCE = 5;
/**
 * When the median sender's step does not lower the loss, the step is too long for this state (along
 * a raw gradient the curvature wins): it is shortened by SHRINK_FACTOR and measured again, at most
 * this many times; a round whose median step still does not descend is not judged.
 */
export const MAX_STEP_SHRINKS = 3;
export const SHRINK_FACTOR = 4;
/** A peer is flagged when `HURT_TO_FLAG` of its last `RECENT_SAMPLES` scored samples hurt. */
export const RECENT_SAMPLES = 3;
export const HURT_TO_FLAG = 2;
/** Peers whose history is kept at most (the least recently scored are forgotten first). */
const MAX_TRACKED_PEERS = 1024;

/** What became of a round the validator was given. */
export type RoundOutcome =
  | "judged"
  /** Fewer than MIN_SENDERS complete contributions. */
  | "too-few-senders"
  /** Replaced, while another round was being scored, by a newer one. */
  | "skipped-while-busy"
  /** The aux held no state of the round's generation. */
  | "no-state"
  /** The median sender's step did not lower the held-out loss, even shortened. */
  | "no-descent"
  /** The scorer failed (a warning says why). */
  | "failed"
  /** The aux saw no contribution of the round (it reduced no part, or all its senders were excluded). */
  | "no-contributions";

/** One sender's contribution to the validator's part in one round, put back together from its chunks. */
interface SenderSample {
  readonly values: Float32Array;
  /** Elements received so far; complete when it equals `values.length`. */
  received: number;
}

/** The contributions of one round, as the reducer hands them over. */
interface RoundSample {
  readonly epoch: number;
  readonly groupId: string;
  readonly partStart: number;
  readonly partLength: number;
  readonly senders: Map<string, SenderSample>;
  /** Senders seen, for the reservoir sample. */
  seen: number;
  generation?: number;
}

/** One scored sample of a peer. */
interface Verdict {
  readonly epoch: number;
  readonly hurt: boolean;
}

interface PeerHistory {
  readonly verdicts: Verdict[];
  flagged: boolean;
  lastReportedAt: number;
}

/** The loss change one sender's step caused, with what the report needs. */
interface SenderScore {
  readonly peerId: string;
  readonly norm: number;
  readonly lossAfter: number;
  readonly delta: number;
}

/**
 * The aux as validator (issue 19): it samples what trainers contribute to the rounds it helps
 * average, scores each contribution by the change of held-out loss it causes, and flags peers whose
 * contributions hurt.
 *
 * The aux reduces a part of every round it helps; the swarm tells it each sender's chunks of that
 * part (`Averager.observeContributions`), which `observe` puts back together per sender. When the
 * round succeeded (`finish`), up to `maxSendersPerRound` complete senders, a random sample, are
 * scored in the background: for each sender i, Δ_i = L(θ − s·g_i on the part) − L(θ), L the mean
 * loss on a fixed subset of the test split and θ the aux's newest state, with s from
 * `stepScale` (scaled to the median sender's norm, so one vector 1,000 times the others' cannot
 * hide by scaling everyone's step), shortened while the median sender's step does not lower the
 * loss (a round where it never does is not judged). A contribution hurts when Δ_i > 0 and Δ_i
 * exceeds the round's median Δ by more than the larger of MAD_TOLERANCE·MAD and the smaller of
 * RELATIVE_TOLERANCE·L(θ) and TYPICAL_CHANGE_TOLERANCE·median|Δ|:
 * honest peers' steps lower the loss or move it by noise, while a huge or sign-flipped one climbs
 * it. The judgement rests on an honest majority among each round's sampled senders. A peer is flagged when
 * HURT_TO_FLAG of its last RECENT_SAMPLES scored samples hurt; the aux warns and reports the
 * evidence to the platform, again at most every `reportEveryMs` while the peer keeps hurting.
 *
 * Scoring never holds the averaging up: one round is scored at a time, and a round that finishes
 * meanwhile waits in a single slot, where a newer round replaces it. Rounds with fewer than
 * MIN_SENDERS complete senders are not scored: with two, the median is no honest reference.
 * Non-finite values never get here (the reducer refuses them and excludes their sender).
 */
export class ContributionValidator {
  readonly #options: ContributionValidatorOptions;
  #collecting: RoundSample | undefined;
  #next: RoundSample | undefined;
  #running: Promise<void> | undefined;
  #scorer: LossScorer | undefined;
  /**
   * θ with one sender's step on the part, reused from round to round: a copy, since the aux serves
   * its state to donors while this scores (a large model's vector is tens of megabytes).
   */
  #stepped: Float32Array | undefined;
  readonly #peers = new Map<string, PeerHistory>();
  #rounds = 0;
  /** Outcomes since the last summary, and when that was. */
  #outcomes = new Map<RoundOutcome, number>();
  #summarizedAt: number | undefined;

  constructor(options: ContributionValidatorOptions) {
    this.#options = options;
  }

  /** Rounds scored so far. */
  get roundsScored(): number {
    return this.#rounds;
  }

  /** Whether a round is being scored. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** What became of the rounds given since the last summary (see `summaryEveryMs`). */
  outcomes(): ReadonlyMap<RoundOutcome, number> {
    return this.#outcomes;
  }

  /** Peers flagged now (hurt in HURT_TO_FLAG of their last RECENT_SAMPLES samples). */
  flagged(): string[] {
    return [...this.#peers.entries()].filter(([, history]) => history.flagged).map(([peer]) => peer);
  }

  /** Takes one sender's chunk of the part this aux reduces (from `Averager.observeContributions`). */
  observe(contribution: ObservedContribution): void {
    const { epoch, groupId, part, peerId, start, values } = contribution;
    let round = this.#collecting;
    if (round?.groupId !== groupId || round.epoch !== epoch) {
      // A new round (or the retry of a failed one): what was collected of the old one is dropped.
      round = {
        epoch,
        groupId,
        partStart: part.start,
        partLength: part.end - part.start,
        senders: new Map(),
        seen: 0,
      };
      this.#collecting = round;
    }
    let sender = round.senders.get(peerId);
    if (sender === undefined) {
      if (start !== part.start) return; // joined the sample mid-way (evicted before): not complete
      sender = this.#admit(round, peerId);
      if (sender === undefined) return;
    }
    const offset = start - round.partStart;
    if (offset !== sender.received || offset + values.length > round.partLength) return;
    sender.values.set(values, offset);
    sender.received += values.length;
  }

  /** The round of `epoch` that this aux helped succeeded: scores its complete senders in the background. */
  finish(epoch: number): void {
    const round = this.#collecting;
    this.#collecting = undefined;
    if (this.#options.signal.aborted) return;
    if (round?.epoch !== epoch) {
      this.#count("no-contributions");
      return;
    }
    for (const [peer, sender] of round.senders) {
      if (sender.received !== round.partLength) round.senders.delete(peer);
    }
    if (round.senders.size < MIN_SENDERS) {
      this.#count("too-few-senders");
      this.#options.logger.debug(
        { epoch, senders: round.senders.size },
        `not validating the round of epoch ${epoch}: fewer than ${MIN_SENDERS} complete contributions`,
      );
      return;
    }
    round.generation = this.#options.generation();
    if (this.#next !== undefined) {
      this.#count("skipped-while-busy");
      this.#options.logger.debug(
        { epoch: this.#next.epoch, newerEpoch: epoch },
        "the validator is busy: skipping a round for a newer one",
      );
    }
    this.#next = round;
    if (this.#running === undefined) this.#start();
  }

  /** The round this aux was helping failed: what was collected of it is dropped. */
  discard(): void {
    this.#collecting = undefined;
  }

  /** Resolves once no round is being scored or waiting. */
  async idle(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  /** Waits for the scoring in flight (abort the signal first to cut it short), then lets the scorer go. */
  async close(): Promise<void> {
    this.#collecting = undefined;
    await this.idle();
    this.#scorer?.dispose();
    this.#scorer = undefined;
    this.#stepped = undefined;
  }

  /** Reservoir sampling of the round's senders: each of the first n seen is kept with probability k/n. */
  #admit(round: RoundSample, peerId: string): SenderSample | undefined {
    const cap = this.#options.maxSendersPerRound ?? 8;
    round.seen += 1;
    if (round.senders.size >= cap) {
      const slot = Math.floor((this.#options.random ?? Math.random)() * round.seen);
      if (slot >= cap) return undefined;
      const evicted = [...round.senders.keys()][slot];
      if (evicted !== undefined) round.senders.delete(evicted);
    }
    const sender: SenderSample = { values: new Float32Array(round.partLength), received: 0 };
    round.senders.set(peerId, sender);
    return sender;
  }

  #start(): void {
    this.#running = this.#drain().finally(() => {
      this.#running = undefined;
      if (this.#next !== undefined && !this.#options.signal.aborted) this.#start();
    });
  }

  async #drain(): Promise<void> {
    for (let round = this.#take(); round !== undefined; round = this.#take()) {
      if (this.#stopped()) return;
      try {
        this.#count(await this.#score(round));
      } catch (error) {
        if (this.#stopped()) return;
        this.#count("failed");
        this.#options.logger.warn(
          { epoch: round.epoch, err: error },
          `could not validate the contributions of epoch ${round.epoch}: ${describe(error)}; the aux goes on`,
        );
      }
    }
  }

  /** A call, so that the compiler does not assume the signal unchanged across awaits. */
  #stopped(): boolean {
    return this.#options.signal.aborted;
  }

  #take(): RoundSample | undefined {
    const round = this.#next;
    this.#next = undefined;
    return round;
  }

  /** Scores the round's senders and judges them, unless it cannot (the outcome says why). */
  async #score(round: RoundSample): Promise<RoundOutcome> {
    const { logger, signal } = this.#options;
    const state = this.#options.parameters();
    const { epoch, partStart, partLength } = round;
    if (state === null || state.generation !== round.generation) {
      logger.debug({ epoch }, "not validating: this aux holds no state of the round's generation yet");
      return "no-state";
    }
    if (state.parameters.length < partStart + partLength) {
      throw new Error(
        `the aux's state has ${state.parameters.length} parameters, the round's part ends at ${partStart + partLength}`,
      );
    }
    const senders = [...round.senders.entries()].map(([peerId, sample]) => ({
      peerId,
      values: sample.values,
      norm: l2Norm(sample.values),
    }));
    const medianNorm = median(senders.map((sender) => sender.norm));
    if (!(medianNorm > 0)) return "no-descent";
    let scale = this.#options.stepScale(partLength, medianNorm);
    this.#scorer ??= await this.#options.openScorer(signal);
    const scorer = this.#scorer;
    const options = { maxBatches: this.#options.batches };
    const baseline = await scorer.loss(state.parameters, signal, options);
    if (!Number.isFinite(baseline)) {
      throw new Error(`the held-out loss of the aux's state of step ${state.step} is not finite`);
    }
    if (this.#stepped?.length !== state.parameters.length) {
      this.#stepped = new Float32Array(state.parameters.length);
    }
    const stepped = this.#stepped;
    stepped.set(state.parameters);
    const part = stepped.subarray(partStart, partStart + partLength);
    const original = state.parameters.subarray(partStart, partStart + partLength);
    let scores: SenderScore[];
    let medianDelta: number;
    for (let shrinks = 0; ; shrinks++) {
      scores = [];
      for (const sender of senders) {
        signal.throwIfAborted();
        for (let i = 0; i < partLength; i++) part[i] = (original[i] ?? 0) - scale * (sender.values[i] ?? 0);
        // A step that drives the loss past what is finite is an infinite increase (the scorer says +Infinity).
        const lossAfter = await scorer.loss(stepped, signal, options);
        scores.push({ peerId: sender.peerId, norm: sender.norm, lossAfter, delta: lossAfter - baseline });
      }
      medianDelta = median(scores.map((score) => score.delta));
      if (medianDelta < 0 || shrinks === MAX_STEP_SHRINKS) break;
      scale /= SHRINK_FACTOR;
    }
    signal.throwIfAborted();
    if (!(medianDelta < 0)) {
      logger.debug(
        { epoch, parametersStep: state.step, baseline, medianDelta },
        `not judging the contributions of epoch ${epoch}: the median one does not lower the held-out loss`,
      );
      return "no-descent";
    }
    this.#rounds += 1;
    const deltas = scores.map((score) => score.delta);
    const mad = median(deltas.map((delta) => Math.abs(delta - medianDelta)));
    const typicalChange = median(deltas.map((delta) => Math.abs(delta)));
    const tolerance = Math.max(
      MAD_TOLERANCE * mad,
      Math.min(RELATIVE_TOLERANCE * Math.abs(baseline), TYPICAL_CHANGE_TOLERANCE * typicalChange),
    );
    logger.debug(
      {
        epoch,
        parametersStep: state.step,
        baseline,
        medianDelta,
        tolerance,
        scale,
        deltas: Object.fromEntries(scores.map((score) => [score.peerId, score.delta])),
      },
      `validated the contributions of epoch ${epoch}`,
    );
    for (const score of scores) {
      const hurt = score.delta > 0 && score.delta - medianDelta > tolerance;
      this.#judge(round, score, hurt, { baseline, medianDelta, normRatio: score.norm / medianNorm });
    }
    return "judged";
  }

  /**
   * Counts what became of a round; once `summaryEveryMs` passed since the last summary, says at
   * info what became of the rounds since, and starts counting again.
   */
  #count(outcome: RoundOutcome): void {
    this.#outcomes.set(outcome, (this.#outcomes.get(outcome) ?? 0) + 1);
    const now = (this.#options.now ?? Date.now)();
    this.#summarizedAt ??= now;
    const seconds = (now - this.#summarizedAt) / 1000;
    if (seconds * 1000 < (this.#options.summaryEveryMs ?? 60_000)) return;
    const outcomes = Object.fromEntries(this.#outcomes);
    const judged = this.#outcomes.get("judged") ?? 0;
    const given = [...this.#outcomes.values()].reduce((sum, count) => sum + count, 0);
    const reasons = [...this.#outcomes.entries()]
      .filter(([kind]) => kind !== "judged")
      .map(([kind, count]) => `${count} ${kind}`)
      .join(", ");
    this.#options.logger.info(
      { outcomes, flagged: this.flagged().length },
      `validator: judged ${judged} of the ${given} rounds it helped in the last ${Math.round(seconds)} s` +
        (reasons === "" ? "" : ` (not judged: ${reasons})`),
    );
    this.#outcomes = new Map();
    this.#summarizedAt = now;
  }

  #judge(
    round: RoundSample,
    score: SenderScore,
    hurt: boolean,
    evidence: { baseline: number; medianDelta: number; normRatio: number },
  ): void {
    const { logger } = this.#options;
    const now = (this.#options.now ?? Date.now)();
    const history = this.#history(score.peerId);
    history.verdicts.push({ epoch: round.epoch, hurt });
    if (history.verdicts.length > RECENT_SAMPLES) history.verdicts.shift();
    const hurting = history.verdicts.filter((verdict) => verdict.hurt);
    const wasFlagged = history.flagged;
    history.flagged = hurting.length >= HURT_TO_FLAG;
    if (history.flagged && !wasFlagged) {
      logger.warn(
        {
          peer: score.peerId,
          epoch: round.epoch,
          baselineLoss: evidence.baseline,
          lossAfter: score.lossAfter,
          medianDelta: evidence.medianDelta,
          normRatio: evidence.normRatio,
          hurtSamples: hurting.length,
          recentSamples: history.verdicts.length,
        },
        `flagged ${score.peerId}: its contributions raised the held-out loss in ${hurting.length} of its last ${history.verdicts.length} samples`,
      );
    } else if (wasFlagged && !history.flagged) {
      logger.info(
        { peer: score.peerId },
        `${score.peerId} is no longer flagged: its recent contributions help`,
      );
    }
    if (!history.flagged || !hurt) return;
    if (wasFlagged && now - history.lastReportedAt < (this.#options.reportEveryMs ?? 30_000)) return;
    const flag: ContributionFlag = {
      peerId: score.peerId,
      epoch: round.epoch,
      generation: round.generation ?? 0,
      firstHurtEpoch: Math.min(...hurting.map((verdict) => verdict.epoch)),
      baselineLoss: evidence.baseline,
      lossAfter: Number.isFinite(score.lossAfter) ? score.lossAfter : null,
      medianDelta: evidence.medianDelta,
      normRatio: evidence.normRatio,
      hurtSamples: hurting.length,
      recentSamples: history.verdicts.length,
    };
    const previous = history.lastReportedAt;
    history.lastReportedAt = now;
    this.#options.report(flag, this.#options.signal).then(
      () => {
        logger.info({ peer: flag.peerId, epoch: flag.epoch }, "reported a flagged peer to the platform");
      },
      (error: unknown) => {
        // Sent again with the next sample that hurts.
        history.lastReportedAt = previous;
        if (this.#options.signal.aborted) return;
        logger.warn(
          { peer: flag.peerId, err: error },
          `could not report the flagged peer ${flag.peerId}: ${describe(error)}`,
        );
      },
    );
  }

  #history(peerId: string): PeerHistory {
    let history = this.#peers.get(peerId);
    if (history === undefined) {
      history = { verdicts: [], flagged: false, lastReportedAt: Number.NEGATIVE_INFINITY };
    } else {
      this.#peers.delete(peerId);
    }
    // Most recently scored last: the first entries are the ones to forget.
    this.#peers.set(peerId, history);
    if (this.#peers.size > MAX_TRACKED_PEERS) {
      const oldest = this.#peers.keys().next();
      if (oldest.done !== true) this.#peers.delete(oldest.value);
    }
    return history;
  }
}

function l2Norm(values: Float32Array): number {
  let squares = 0;
  for (const value of values) squares += value * value;
  return Math.sqrt(squares);
}

/** The median (the mean of the middle two for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const upper = sorted[middle] ?? Number.NaN;
  if (sorted.length % 2 === 1) return upper;
  const lower = sorted[middle - 1] ?? Number.NaN;
  // Two infinite changes of loss in the middle: their mean would be NaN.
  return lower === upper ? upper : (lower + upper) / 2;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
