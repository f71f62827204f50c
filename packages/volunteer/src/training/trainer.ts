import type {
  CollaborativeOptimizer,
  CollaborativeOptimizerEvent,
  Connectivity,
  GlobalProgressView,
} from "@barnraise/swarm";
import { type Batch, mixSeed, type TrainableModel, yieldToEvents } from "@barnraise/models";
import type { PeerPhase, PeerStatus } from "../status/peer-status.ts";
import type { LossReportingProgress } from "./loss-reporting-progress.ts";

/** What the trainer reads about the swarm for the status line. */
export interface SwarmView {
  global(): GlobalProgressView;
  /** Peers with fresh progress, this one included. */
  peersOnline(): number;
  /** This peer's mode and its paths to the members; absent where unknown. */
  connectivity?(): Connectivity;
  /** What keeps this peer from the swarm (refused, cut off), for the status line; undefined if nothing. */
  note?(): string | undefined;
}

export interface TrainerOptions {
  readonly model: TrainableModel;
  readonly optimizer: CollaborativeOptimizer;
  /** The optimizer's progress port, which also carries this peer's losses to the swarm. */
  readonly progress: LossReportingProgress;
  /** Endless training batches. */
  readonly batches: AsyncIterator<Batch>;
  readonly swarm: SwarmView;
  /** Seeds dropout; mixed with a minibatch counter so no two minibatches share a draw. */
  readonly seed: number;
  /** Stop once the swarm's step reaches this; unlimited when undefined. */
  readonly maxSteps?: number | undefined;
  /** Told after every minibatch and phase change. */
  readonly onStatus?: (status: PeerStatus) => void;
  /** Told of the optimizer's events (steps, failed rounds, state loads). */
  readonly onEvent?: (event: CollaborativeOptimizerEvent) => void;
  /** Wait after a failed round or state load before the next attempt; default 1 s. */
  readonly retryDelayMs?: number;
  /** Clock in milliseconds; default `Date.now`. */
  readonly now?: () => number;
  /** Told once, when the first minibatch's gradients have been accumulated. */
  readonly onFirstContribution?: (samples: number) => void;
  /**
   * The share of the time this machine may compute, in (0, 1] (a tab's use limit); read after
   * every minibatch, which is then followed by a rest long enough to keep to it. Default 1.
   */
  readonly dutyCycle?: () => number;
  /**
   * The CPU time this process has used, in milliseconds, where the runtime tells it (Node.js). With
   * it the use limit counts all the process's work (averaging, serving state, the network) over a
   * window of USE_WINDOW_MS, not only the minibatches' compute.
   */
  readonly cpuTimeMs?: () => number;
  /**
   * Told `true` when the loop starts holding (the round in flight, and one it joined on the way, is
   * over: nothing more is computed or averaged until the holds are lifted), and `false` when it
   * trains again; not told when it stops while held.
   */
  readonly onHeld?: (held: boolean) => void;
}

/**
 * Why training is held: the organizer paused the run, the volunteer paused this machine (a tab's
 * pause button, or its page hidden), or the peer is cut off from a swarm that trains without it
 * (see CutOffGuard).
 */
export type TrainingHold = "organizer" | "volunteer" | "cut-off";

export interface TrainResult {
  /** "max-steps": the run reached `maxSteps`; "stopped": `stop()` was called. */
  readonly reason: "max-steps" | "stopped";
  readonly step: number;
  /** Samples this peer contributed to applied steps. */
  readonly samplesContributed: number;
  readonly minibatches: number;
}

/** The trainer was aborted hard (the second Ctrl-C): whatever was in flight was abandoned. */
export class TrainingAbortedError extends Error {
  override readonly name = "TrainingAbortedError";
  readonly code = "TRAINING_ABORTED";
}

/**
 * The volunteer's training loop (DeDLOC §3.1): compute a minibatch's gradients with the model
 * preset, hand them to the collaborative optimizer, and let it step whenever the swarm has the
 * target batch. The optimizer owns the parameters; the model's variables are refreshed from them
 * after every applied step or state load.
 *
 * The first thing the loop does is ask the optimizer to step, which makes a new peer load the
 * swarm's state from its donors before it computes a single gradient. `stop()` ends the loop
 * between minibatches and lets an averaging round in flight finish, so the peer leaves the swarm
 * without breaking a round; aborting `run`'s signal abandons everything at once.
 */
export class Trainer {
  readonly #options: TrainerOptions;
  readonly #stopController = new AbortController();
  #phase: PeerPhase = "loading-state";
  /** The optimizer's `workingVersion` the model's variables hold; undefined before the first load. */
  #loadedVersion: number | undefined;
  #samplesContributed = 0;
  #minibatches = 0;
  #contributed = false;
  /** After a failed round or state load, no new attempt before this time (ms). */
  #retryAt = 0;
  /**
   * Set while training is held: the organizer paused the run, or the peer is cut off from the
   * swarm; resolved (and cleared) when the last hold is lifted.
   */
  #pause: PromiseWithResolvers<undefined> | null = null;
  readonly #holds = new Set<TrainingHold>();
  /** This pause has let the peer join one round on its way out (see `#handOff`). */
  #handedOff = false;

  constructor(options: TrainerOptions) {
    this.#options = options;
  }

  /** Ends the loop after the current minibatch or averaging round; `run` then resolves "stopped". */
  stop(): void {
    if (this.#stopController.signal.aborted) return;
    this.#stopController.abort();
    this.#setPhase("stopping");
  }

  /**
   * The organizer paused the run: no more minibatches after the current one (a round in flight
   * finishes) until `resume()`. The peer stays in the swarm and keeps serving its state.
   */
  pause(hold: TrainingHold = "organizer"): void {
    this.#holds.add(hold);
    this.#pause ??= Promise.withResolvers<undefined>();
    this.#setPhase(this.#heldPhase());
  }

  /** Lifts `hold`; training goes on when no other hold remains. */
  resume(hold: TrainingHold = "organizer"): void {
    this.#holds.delete(hold);
    const pause = this.#pause;
    if (pause === null) return;
    if (this.#holds.size > 0) {
      this.#setPhase(this.#heldPhase());
      return;
    }
    this.#pause = null;
    this.#handedOff = false;
    pause.resolve(undefined);
  }

  /** Whether the organizer's pause holds training. */
  get paused(): boolean {
    return this.#holds.has("organizer");
  }

  /** Whether the peer holds training because it is cut off from the swarm. */
  get cutOff(): boolean {
    return this.#holds.has("cut-off");
  }

  /** Tells the status listener again now: what it shows changed outside the loop (the swarm note). */
  refreshStatus(): void {
    this.#emitStatus();
  }

  #heldPhase(): PeerPhase {
    return this.#holds.has("cut-off") && this.#holds.size === 1 ? "cut-off" : "paused";
  }

  get stopping(): boolean {
    return this.#stopController.signal.aborted;
  }

  /** Where the current use-limit window began: wall time (performance.now) and the process's CPU time. */
  #useWindow: { wall: number; cpu: number } | undefined;

  /** A call, not a property read, so the compiler does not assume it unchanged across an await. */
  #stopRequested(): boolean {
    return this.#stopController.signal.aborted;
  }

  /** Whether a hold is on (a call, for the same reason). */
  #pausing(): boolean {
    return this.#pause !== null;
  }

  /** Trains until `maxSteps`, `stop()` or `signal` (which rejects with TrainingAbortedError). */
  async run(signal?: AbortSignal): Promise<TrainResult> {
    const { optimizer } = this.#options;
    const unsubscribe = optimizer.on((event) => {
      this.#onOptimizerEvent(event);
    });
    try {
      return await this.#loop(signal);
    } catch (error) {
      if (signal?.aborted === true) throw new TrainingAbortedError("training was aborted", { cause: error });
      throw error;
    } finally {
      unsubscribe();
    }
  }

  async #loop(signal: AbortSignal | undefined): Promise<TrainResult> {
    const { optimizer, model, batches, progress, maxSteps } = this.#options;
    const stopped = this.#stopController.signal;
    for (;;) {
      if (this.#stopRequested()) return await this.#finish("stopped");
      const pause = this.#pause;
      if (pause !== null && !this.#handOff()) {
        this.#setPhase(this.#heldPhase());
        this.#options.onHeld?.(true);
        if ((await raceStop(pause.promise, stopped, signal)) === STOPPED)
          return await this.#finish("stopped");
        this.#options.onHeld?.(false);
        // A pause is no credit: the use limit counts from the resume.
        this.#useWindow = undefined;
        continue;
      }
      if (this.#now() >= this.#retryAt) {
        if (this.#swarmReady()) this.#setPhase("averaging");
        // A round (or the first state load) runs to its end even when stop() is called meanwhile.
        await optimizer.maybeStep(signal);
      }
      // Pausing: the round it joined on its way out is over, and no minibatch follows.
      if (this.#pausing()) continue;
      if (!this.#stopRequested()) this.#setPhase("training");
      if (maxSteps !== undefined && optimizer.epoch >= maxSteps) return await this.#finish("max-steps");
      if (this.#stopRequested()) return await this.#finish("stopped");

      const next = await raceStop(batches.next(), stopped, signal);
      if (next === STOPPED) return await this.#finish("stopped");
      if (next.done === true) throw new Error("the training data stream ended");
      // Compute time is the minibatch's whole local work: loading the weights, the gradients, and
      // the optimizer's share (diloco's inner step), not the wait for data or for the swarm.
      const computeStart = performance.now();
      if (this.#loadedVersion !== optimizer.workingVersion) {
        model.setParameters(optimizer.workingParameters);
        this.#loadedVersion = optimizer.workingVersion;
      }
      const epoch = optimizer.epoch;
      const result = await model.computeGradients(next.value, mixSeed(this.#options.seed, this.#minibatches));
      this.#minibatches += 1;
      progress.addLoss(epoch, result.loss);
      optimizer.accumulate(result.gradient, result.samples);
      const computeMs = performance.now() - computeStart;
      progress.addWork(computeMs / 1000, epoch);
      if (!this.#contributed) {
        this.#contributed = true;
        this.#options.onFirstContribution?.(result.samples);
      }
      this.#emitStatus();
      // The step above is synchronous; let the swarm's RPCs and timers run before the next one.
      await yieldToEvents();
      if ((await this.#rest(computeMs, stopped, signal)) === STOPPED) return await this.#finish("stopped");
    }
  }

  /**
   * Rests after `computeMs` of work to keep to the use limit, in short slices: a raised limit, a
   * pause, or a swarm that reached its target (the round must not wait for this peer) ends the
   * rest early, and a stop ends it at once. Where the process's CPU time is known, the rest keeps
   * all of it over the current window at the limit; otherwise the minibatch's compute time.
   */
  async #rest(computeMs: number, stopped: AbortSignal, signal: AbortSignal | undefined): Promise<unknown> {
    const started = performance.now();
    const { cpuTimeMs } = this.#options;
    if (
      cpuTimeMs !== undefined &&
      (this.#useWindow === undefined || started - this.#useWindow.wall >= USE_WINDOW_MS)
    ) {
      this.#useWindow = { wall: started, cpu: cpuTimeMs() };
    }
    for (;;) {
      const dutyCycle = this.#options.dutyCycle?.() ?? 1;
      const window = this.#useWindow;
      const left =
        cpuTimeMs === undefined || window === undefined
          ? started + restAfter(computeMs, dutyCycle) - performance.now()
          : dutyCycle >= 1
            ? 0
            : (cpuTimeMs() - window.cpu) / dutyCycle - (performance.now() - window.wall);
      if (left <= 0 || this.#pause !== null || this.#swarmReady()) return undefined;
      if ((await raceStop(sleep(Math.min(left, REST_SLICE_MS)), stopped, signal)) === STOPPED) return STOPPED;
    }
  }

  /**
   * Whether the volunteer's pause lets this peer join the round the swarm is about to average
   * before it holds: once per pause, when its samples are part of a total that has reached the
   * target (the others are gathering and count on them), so its work goes into the step rather than
   * wait for a resume. Not for the organizer's pause (everyone holds) nor a cut-off peer.
   */
  #handOff(): boolean {
    if (this.#handedOff || this.#holds.size !== 1 || !this.#holds.has("volunteer")) return false;
    if (this.#options.optimizer.samplesAccumulated <= 0 || !this.#swarmReady()) return false;
    this.#handedOff = true;
    return true;
  }

  async #finish(reason: TrainResult["reason"]): Promise<TrainResult> {
    await this.#options.optimizer.pendingStep();
    return {
      reason,
      step: this.#options.optimizer.epoch,
      samplesContributed: this.#samplesContributed,
      minibatches: this.#minibatches,
    };
  }

  #onOptimizerEvent(event: CollaborativeOptimizerEvent): void {
    if (event.type === "step") {
      // Only samples that went into the swarm's model count (a step alone while others train does not).
      if (event.shared) {
        this.#samplesContributed += event.localSamples;
        this.#options.progress.addContributed(event.localSamples);
      }
      this.#options.progress.addRound(event.epoch - 1, event.bytesSent ?? 0);
    } else if (event.type === "state-loaded") {
      // Caught up (possibly right after a failed round): the next attempt need not wait.
      this.#retryAt = 0;
    } else {
      // A failed round keeps its gradients; training goes on, and the next attempt waits a moment,
      // so that a peer whose partners are still catching up does not retry after every minibatch.
      this.#retryAt = this.#now() + (this.#options.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS);
    }
    this.#options.onEvent?.(event);
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  #swarmReady(): boolean {
    const global = this.#options.swarm.global();
    const epoch = this.#options.optimizer.epoch;
    return (
      global.epoch > epoch || (global.epoch === epoch && global.samplesAccumulated >= global.targetBatchSize)
    );
  }

  #setPhase(phase: PeerPhase): void {
    if (phase === this.#phase) return;
    this.#phase = phase;
    this.#emitStatus();
  }

  #emitStatus(): void {
    const { onStatus, optimizer, swarm, progress } = this.#options;
    if (onStatus === undefined) return;
    const global = swarm.global();
    const connectivity = swarm.connectivity?.();
    const note = swarm.note?.();
    onStatus({
      phase: this.#phase,
      step: optimizer.epoch,
      globalSamples: global.epoch === optimizer.epoch ? global.samplesAccumulated : 0,
      targetBatchSize: global.targetBatchSize,
      etaSeconds: global.etaSeconds,
      localSamplesPerSecond: optimizer.samplesPerSecond,
      samplesContributed: this.#samplesContributed,
      peersOnline: swarm.peersOnline(),
      loss: progress.meanLoss(optimizer.epoch),
      ...(connectivity === undefined
        ? {}
        : {
            network: {
              mode: connectivity.mode,
              direct: connectivity.direct,
              relayed: connectivity.relayed,
              upgraded: connectivity.upgraded,
              ...(connectivity.webrtc === undefined ? {} : { webrtc: connectivity.webrtc }),
            },
          }),
      ...(note === undefined ? {} : { swarmNote: note }),
    });
  }
}

const DEFAULT_RETRY_DELAY_MS = 1_000;
/** A rest is taken in slices this long, so that what ends it early is seen soon. */
const REST_SLICE_MS = 200;
/** The use limit is held over windows this long (with the process's CPU time). */
const USE_WINDOW_MS = 10_000;

/** The rest after `computeMs` of work that keeps the machine busy `dutyCycle` of the time. */
export function restAfter(computeMs: number, dutyCycle: number): number {
  if (!(dutyCycle > 0) || dutyCycle >= 1) return 0;
  return (computeMs * (1 - dutyCycle)) / dutyCycle;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const STOPPED = Symbol("stopped");

/**
 * Waits for `promise`, or returns STOPPED as soon as `stop` fires (the promise is left to settle on
 * its own). `abort` rejects at once.
 */
async function raceStop<T>(
  promise: Promise<T>,
  stop: AbortSignal,
  abort: AbortSignal | undefined,
): Promise<T | typeof STOPPED> {
  if (stop.aborted) return STOPPED;
  abort?.throwIfAborted();
  let cleanup = (): void => undefined;
  const interrupted = new Promise<typeof STOPPED>((resolve, reject) => {
    const onStop = () => {
      resolve(STOPPED);
    };
    const onAbort = () => {
      reject(abort?.reason as Error);
    };
    stop.addEventListener("abort", onStop, { once: true });
    abort?.addEventListener("abort", onAbort, { once: true });
    cleanup = () => {
      stop.removeEventListener("abort", onStop);
      abort?.removeEventListener("abort", onAbort);
    };
  });
  try {
    return await Promise.race([promise, interrupted]);
  } finally {
    cleanup();
  }
}
