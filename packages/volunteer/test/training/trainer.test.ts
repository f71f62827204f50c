import { parseExperimentConfig, type ModelConfig } from "@barnraise/protocol";
import {
  CollaborativeOptimizer,
  createFlatOptimizer,
  ParameterLayout,
  type AveragedVector,
  type EpochProgressView,
  type EpochState,
  type GlobalProgress,
  type LocalProgress,
} from "@barnraise/swarm";
import { describe, expect, it, vi } from "vitest";
import type { Batch, GradientResult, ImageBatch, TrainableModel } from "@barnraise/models";
import { LossReportingProgress } from "../../src/training/loss-reporting-progress.ts";
import { restAfter, Trainer, TrainingAbortedError } from "../../src/training/trainer.ts";
import type { PeerStatus } from "../../src/status/peer-status.ts";
import { modelKindOf } from "@barnraise/models";

/**
 * The training loop against a one-peer "swarm" of fakes: the model is a quadratic bowl in plain
 * JavaScript, the optimizer is the real CollaborativeOptimizer, and the progress, averaging and
 * state ports are scripted.
 */

const SIZE = 2;
const TARGET = new Float32Array([3, -1]);
const layout = ParameterLayout.fromShapes([{ name: "w", shape: [SIZE] }]);

/** loss = ‖w − TARGET‖², gradient 2(w − TARGET); records the parameters it computed with. */
class BowlModel implements TrainableModel {
  readonly config = { kind: "mnist-mlp", hiddenUnits: [1], activation: "relu" } as ModelConfig;
  readonly kind = modelKindOf(this.config);
  readonly layout = layout;
  readonly computedWith: number[][] = [];
  readonly setCalls: number[][] = [];
  #w = new Float32Array(SIZE);

  initialParameters(): Float32Array {
    return new Float32Array(SIZE);
  }
  setParameters(parameters: Float32Array): void {
    this.#w = parameters.slice();
    this.setCalls.push([...parameters]);
  }
  computeGradients(batch: Batch): Promise<GradientResult> {
    this.computedWith.push([...this.#w]);
    const gradient = this.#w.map((w, i) => 2 * (w - (TARGET[i] ?? 0)));
    const loss = this.#w.reduce((sum, w, i) => sum + (w - (TARGET[i] ?? 0)) ** 2, 0);
    return Promise.resolve({ loss, samples: batch.size, gradient });
  }
  evaluate(): never {
    throw new Error("not used");
  }
  dispose(): void {
    // nothing to free
  }
}

function imageBatch(size: number): ImageBatch {
  return { kind: "image", size, pixels: new Float32Array(size * 784), labels: new Int32Array(size) };
}

function endless(size: number): AsyncIterator<Batch> {
  return { next: () => Promise.resolve({ done: false, value: imageBatch(size) }) };
}

function oneBatch(batch: Batch): AsyncIterator<Batch> {
  let given = false;
  return {
    next: () => {
      const done = given;
      given = true;
      return Promise.resolve(done ? { done: true, value: undefined } : { done: false, value: batch });
    },
  };
}

/** A swarm of one: global progress is this peer's, averaging returns the input after `delay`. */
class OnePeerSwarm {
  readonly reports: LocalProgress[] = [];
  averageDelay: Promise<void> = Promise.resolve();
  averageCalls = 0;
  /** What each averaging round returns besides the vector; default: this peer is the only trainer. */
  outcomes: Omit<AveragedVector, "vector">[] = [];
  state: EpochState | null = null;
  /** Bytes each round says this peer sent. */
  readonly bytesPerRound = 4321;
  #last: LocalProgress = { epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 };

  target: number;

  constructor(target: number) {
    this.target = target;
  }

  report(progress: LocalProgress): void {
    this.reports.push(progress);
    this.#last = progress;
  }
  global(): GlobalProgress {
    return {
      epoch: this.#last.epoch,
      samplesAccumulated: this.#last.samplesAccumulated,
      targetBatchSize: this.target,
      etaSeconds: 1,
    };
  }
  at(epoch: number): EpochProgressView {
    const own = this.#last.epoch === epoch;
    return {
      epoch,
      samplesAccumulated: own ? this.#last.samplesAccumulated : 0,
      targetBatchSize: this.target,
      etaSeconds: 1,
      peersAtEpoch: own ? 1 : 0,
    };
  }
  async average(vector: Float32Array, weight: number, signal?: AbortSignal): Promise<AveragedVector> {
    this.averageCalls += 1;
    await new Promise<void>((resolve, reject) => {
      signal?.addEventListener("abort", () => {
        reject(new Error("round aborted"));
      });
      void this.averageDelay.then(resolve);
    });
    const outcome = this.outcomes.shift() ?? { groupSize: 1, totalWeight: weight, soleTrainer: true };
    return { vector: vector.slice(), bytesSent: this.bytesPerRound, ...outcome };
  }
}

function setUp(
  options: {
    target?: number;
    batch?: number;
    maxSteps?: number;
    note?: () => string | undefined;
    dutyCycle?: () => number;
    cpuTimeMs?: () => number;
    onHeld?: (held: boolean) => void;
    /** Told of each status after it is recorded. */
    onStatus?: (status: PeerStatus) => void;
  } = {},
) {
  const target = options.target ?? 8;
  const swarm = new OnePeerSwarm(target);
  const model = new BowlModel();
  const config = parseExperimentConfig({
    training: {
      targetBatchSize: target,
      ...(options.maxSteps === undefined ? {} : { maxSteps: options.maxSteps }),
    },
    optimizer: { name: "adam", learningRate: 0.1 },
  });
  const progress = new LossReportingProgress(swarm);
  const optimizer = new CollaborativeOptimizer({
    config,
    layout,
    parameters: new Float32Array(SIZE),
    progress,
    averager: { average: (_epoch, vector, weight, signal) => swarm.average(vector, weight, signal) },
    state: { loadNewer: () => Promise.resolve(swarm.state) },
  });
  const statuses: PeerStatus[] = [];
  const trainer = new Trainer({
    model,
    optimizer,
    progress,
    batches: endless(options.batch ?? 4),
    swarm: {
      global: () => swarm.global(),
      peersOnline: () => 1,
      connectivity: () => ({ mode: "client", reachability: "relayed", direct: 1, relayed: 2, upgraded: 0 }),
      ...(options.note === undefined ? {} : { note: options.note }),
    },
    seed: 7,
    maxSteps: config.training.maxSteps,
    onStatus: (status) => {
      statuses.push(status);
      options.onStatus?.(status);
    },
    ...(options.onHeld === undefined ? {} : { onHeld: options.onHeld }),
    ...(options.dutyCycle === undefined ? {} : { dutyCycle: options.dutyCycle }),
    ...(options.cpuTimeMs === undefined ? {} : { cpuTimeMs: options.cpuTimeMs }),
  });
  return { swarm, model, optimizer, trainer, statuses };
}

describe("Trainer", () => {
  it("steps each time the target batch is reached and stops at the run's last step", async () => {
    const { trainer, model, optimizer, swarm } = setUp({ target: 8, batch: 4, maxSteps: 5 });
    const result = await trainer.run();
    expect(result).toEqual({ reason: "max-steps", step: 5, samplesContributed: 40, minibatches: 10 });
    expect(optimizer.epoch).toBe(5);
    expect(swarm.averageCalls).toBe(5);
    // The loss falls: the model's parameters follow the optimizer's steps.
    const first = model.computedWith[0] ?? [];
    const last = model.computedWith.at(-1) ?? [];
    const distance = (w: number[]) => Math.hypot((w[0] ?? 0) - 3, (w[1] ?? 0) + 1);
    expect(distance(last)).toBeLessThan(distance(first));
  });

  it("refreshes the model's parameters after every step and computes with the optimizer's values", async () => {
    const { trainer, model, optimizer } = setUp({ target: 4, batch: 4, maxSteps: 3 });
    await trainer.run();
    // One minibatch per step: each computation used the parameters of the step before it.
    expect(model.computedWith).toHaveLength(3);
    expect(model.setCalls).toHaveLength(3);
    expect(model.computedWith[1]).not.toEqual(model.computedWith[0]);
    expect(model.computedWith[2]).not.toEqual(model.computedWith[1]);
    expect(optimizer.parameters).not.toEqual(new Float32Array(model.computedWith[2] ?? []));
  });

  it("loads the swarm's state before it computes its first gradient", async () => {
    const { trainer, model, swarm } = setUp({ target: 8, batch: 4, maxSteps: 7 });
    swarm.state = {
      epoch: 5,
      parameters: new Float32Array([2.5, -0.5]),
      optimizer: { name: "adam", step: 5, slots: { m: new Float32Array(SIZE), v: new Float32Array(SIZE) } },
    };
    const result = await trainer.run();
    expect(model.computedWith[0]).toEqual([2.5, -0.5]);
    // Nothing was reported for epochs before the loaded state.
    expect(swarm.reports.filter((report) => report.samplesAccumulated > 0).every((r) => r.epoch >= 5)).toBe(
      true,
    );
    expect(result).toMatchObject({ reason: "max-steps", step: 7, samplesContributed: 16 });
  });

  it("publishes each epoch's loss sum and minibatch count with its progress", async () => {
    const { trainer, swarm } = setUp({ target: 12, batch: 4, maxSteps: 2 });
    await trainer.run();
    const epoch0 = swarm.reports.filter((report) => report.epoch === 0);
    const last0 = epoch0.at(-1);
    expect(last0).toMatchObject({ samplesAccumulated: 12, minibatches: 3 });
    // w = 0 during epoch 0: every minibatch's loss is ‖TARGET‖² = 10.
    expect(last0?.lossSum).toBeCloseTo(30, 5);
    // A new epoch starts its sums at zero.
    const firstOf1 = swarm.reports.find((report) => report.epoch === 1);
    expect(firstOf1).toMatchObject({ samplesAccumulated: 0, lossSum: 0, minibatches: 0 });
    // …and carries the finished epoch's totals, which a short step could otherwise hide from the monitor.
    expect(firstOf1?.previous).toMatchObject({ epoch: 0, lossSum: last0?.lossSum, minibatches: 3 });
    // …with the epoch's compute and wall seconds, and the bytes its round sent.
    expect(firstOf1?.previous?.computeSeconds).toBeGreaterThan(0);
    expect(firstOf1?.previous?.wallSeconds).toBeGreaterThanOrEqual(firstOf1?.previous?.computeSeconds ?? 0);
    expect(firstOf1?.round).toEqual({ epoch: 0, bytesSent: swarm.bytesPerRound });
    // The session's samples and compute time only grow.
    const totals = swarm.reports.map((report) => report.samplesTotal ?? -1);
    expect(totals.at(-1)).toBe(24);
    expect(totals).toEqual([...totals].sort((a, b) => a - b));
    expect(swarm.reports.at(-1)?.computeSeconds).toBeGreaterThan(0);
  });

  it("credits only samples that went into the swarm's model, not a step taken alone while others train", async () => {
    const { trainer, swarm } = setUp({ target: 8, batch: 4, maxSteps: 3 });
    swarm.outcomes = [
      { groupSize: 2, totalWeight: 16 }, // averaged with another trainer's 8 samples
      { groupSize: 1, totalWeight: 8 }, // a group of one while others train: a model of its own
      { groupSize: 3, totalWeight: 8 }, // an aux and a trainer whose weight was excluded: nobody else's samples
    ];
    const result = await trainer.run();
    expect(result).toMatchObject({ step: 3, samplesContributed: 8 });
    expect(swarm.reports.at(-1)?.samplesTotal).toBe(8);
  });

  it("lets the averaging round in flight finish on stop(), then leaves without computing more", async () => {
    const { trainer, swarm, model, optimizer } = setUp({ target: 8, batch: 4 });
    let release = (): void => undefined;
    swarm.averageDelay = new Promise((resolve) => {
      release = resolve;
    });
    const running = trainer.run();
    while (swarm.averageCalls === 0) await new Promise((resolve) => setImmediate(resolve));
    trainer.stop();
    const computed = model.computedWith.length;
    release();
    const result = await running;
    expect(result.reason).toBe("stopped");
    expect(optimizer.epoch).toBe(1); // the round completed and its step was applied
    expect(result.samplesContributed).toBe(8);
    expect(model.computedWith).toHaveLength(computed);
  });

  it("stops while it waits for data", async () => {
    const { optimizer, swarm } = setUp();
    const progress = new LossReportingProgress(swarm);
    const never: AsyncIterator<Batch> = { next: () => new Promise(() => undefined) };
    const trainer = new Trainer({
      model: new BowlModel(),
      optimizer,
      progress,
      batches: never,
      swarm: { global: () => swarm.global(), peersOnline: () => 1 },
      seed: 1,
    });
    const running = trainer.run();
    await new Promise((resolve) => setTimeout(resolve, 20));
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped", minibatches: 0 });
  });

  it("rejects with TrainingAbortedError when aborted in the middle of a round", async () => {
    const { trainer, swarm } = setUp({ target: 4, batch: 4 });
    swarm.averageDelay = new Promise(() => undefined);
    const abort = new AbortController();
    const running = trainer.run(abort.signal);
    while (swarm.averageCalls === 0) await new Promise((resolve) => setImmediate(resolve));
    abort.abort();
    await expect(running).rejects.toBeInstanceOf(TrainingAbortedError);
  });

  it("keeps training after a failed round and waits before trying again", async () => {
    const { optimizer, swarm } = setUp({ target: 4, batch: 4 });
    const model = new BowlModel();
    let clock = 0;
    let failures = 0;
    const failing = new CollaborativeOptimizer({
      config: parseExperimentConfig({ training: { targetBatchSize: 4 } }),
      layout,
      parameters: optimizer.parameters,
      progress: new LossReportingProgress(swarm),
      averager: {
        average: () => {
          failures += 1;
          if (failures === 2) clock += 500; // still inside the wait: no third attempt yet
          return Promise.reject(new Error("no group"));
        },
      },
      state: { loadNewer: () => Promise.resolve(null) },
    });
    const trainer = new Trainer({
      model,
      optimizer: failing,
      progress: new LossReportingProgress(swarm),
      batches: endless(4),
      swarm: { global: () => swarm.global(), peersOnline: () => 2 },
      seed: 1,
      retryDelayMs: 1_000,
      now: () => clock,
    });
    const running = trainer.run();
    while (model.computedWith.length < 20) await new Promise((resolve) => setImmediate(resolve));
    expect(failures).toBe(1);
    clock += 1_000;
    while (model.computedWith.length < 40) await new Promise((resolve) => setImmediate(resolve));
    expect(failures).toBe(2);
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped", samplesContributed: 0 });
    expect(failing.samplesAccumulated).toBeGreaterThanOrEqual(40 * 4 - 8);
  });

  it("tries the next round without waiting once it has caught up after a failed one", async () => {
    // The swarm averaged epoch 0 without this peer: its round fails, it loads the epoch-1 state at
    // once, and its next round (for epoch 1) must not wait out the retry delay of the failed one.
    const model = new BowlModel();
    const others = { epoch: 1 };
    let local: LocalProgress = { epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 };
    const progress = new LossReportingProgress({
      report: (report) => (local = report),
      global: () => ({
        epoch: Math.max(others.epoch, local.epoch),
        samplesAccumulated: local.epoch >= others.epoch ? local.samplesAccumulated : 0,
        targetBatchSize: 8,
        etaSeconds: 1,
      }),
      at: (epoch) => ({
        epoch,
        samplesAccumulated: local.epoch === epoch ? local.samplesAccumulated : 0,
        targetBatchSize: 8,
        etaSeconds: 1,
        peersAtEpoch: local.epoch === epoch ? 1 : 0,
      }),
    });
    const epochs: number[] = [];
    let loads = 0;
    const optimizer = new CollaborativeOptimizer({
      config: parseExperimentConfig({ training: { targetBatchSize: 8 } }),
      layout,
      parameters: new Float32Array(SIZE),
      progress,
      averager: {
        average: (epoch, vector, weight) => {
          epochs.push(epoch);
          return epoch === 0
            ? Promise.reject(new Error("no group: the round is over"))
            : Promise.resolve({ vector: vector.slice(), groupSize: 2, totalWeight: weight });
        },
      },
      state: {
        loadNewer: (epoch) => {
          loads += 1;
          // Nothing newer when it joins; after its failed round, the others' epoch-1 state.
          if (loads === 1 || epoch >= 1) return Promise.resolve(null);
          const optimizer = createFlatOptimizer(parseExperimentConfig({}).optimizer, layout).exportState();
          return Promise.resolve({ epoch: 1, parameters: new Float32Array([1, 1]), optimizer });
        },
      },
    });
    const trainer = new Trainer({
      model,
      optimizer,
      progress,
      batches: endless(4),
      swarm: { global: () => progress.global(), peersOnline: () => 2 },
      seed: 1,
      retryDelayMs: 1_000,
      now: () => 0, // the clock never moves: a retry delay would hold the next round back forever
      maxSteps: 2,
    });
    await expect(trainer.run()).resolves.toMatchObject({ reason: "max-steps", step: 2 });
    expect(epochs).toEqual([0, 1]);
  });

  it("reports its phase and the swarm's progress on the status line", async () => {
    const { trainer, statuses } = setUp({ target: 8, batch: 4, maxSteps: 2 });
    await trainer.run();
    expect(statuses.some((status) => status.phase === "averaging")).toBe(true);
    const training = statuses.find((status) => status.phase === "training" && status.globalSamples === 4);
    expect(training).toMatchObject({ step: 0, targetBatchSize: 8, peersOnline: 1, loss: 10 });
    // How the peer takes part, for the status line; reachability stays in the logs.
    expect(training?.network).toEqual({ mode: "client", direct: 1, relayed: 2, upgraded: 0 });
    expect(statuses.at(-1)?.samplesContributed).toBeGreaterThan(0);
  });

  it("rejects a run whose data stream ends", async () => {
    const { optimizer, swarm } = setUp();
    const trainer = new Trainer({
      model: new BowlModel(),
      optimizer,
      progress: new LossReportingProgress(swarm),
      batches: oneBatch(imageBatch(2)),
      swarm: { global: () => swarm.global(), peersOnline: () => 1 },
      seed: 1,
    });
    await expect(trainer.run()).rejects.toThrow(/data stream ended/);
  });

  it("TrainingAbortedError is what an abort before the first step gives", async () => {
    const { trainer } = setUp();
    const abort = new AbortController();
    abort.abort();
    await expect(trainer.run(abort.signal)).rejects.toBeInstanceOf(TrainingAbortedError);
  });
});

describe("Trainer holds", () => {
  /** Lets the loop run `count` turns of the event loop. */
  const turns = async (count: number): Promise<void> => {
    for (let i = 0; i < count; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  /** Runs until `model` has computed `count` minibatches. */
  const computed = async (model: BowlModel, count: number): Promise<void> => {
    while (model.computedWith.length < count) await turns(1);
  };
  /** Whether training is held: no minibatch is computed over many turns. */
  const holds = async (model: BowlModel): Promise<boolean> => {
    await turns(5); // a minibatch already started finishes
    const before = model.computedWith.length;
    await turns(50);
    return model.computedWith.length === before;
  };

  it('holds training while the organizer\'s pause lasts, and says "paused"', async () => {
    const { trainer, model, statuses } = setUp();
    const running = trainer.run();
    await computed(model, 3);
    trainer.pause();
    expect(trainer.paused).toBe(true);
    expect(trainer.cutOff).toBe(false);
    expect(statuses.at(-1)?.phase).toBe("paused");
    expect(await holds(model)).toBe(true);
    trainer.resume();
    expect(trainer.paused).toBe(false);
    await computed(model, model.computedWith.length + 3);
    expect(statuses.at(-1)?.phase).not.toBe("paused");
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped" });
  });

  it('holds training while cut off, says "cut-off", and is not paused by the organizer', async () => {
    const { trainer, model, statuses } = setUp();
    const running = trainer.run();
    await computed(model, 3);
    trainer.pause("cut-off");
    expect(trainer.cutOff).toBe(true);
    expect(trainer.paused).toBe(false);
    expect(statuses.at(-1)?.phase).toBe("cut-off");
    expect(await holds(model)).toBe(true);
    expect(statuses.at(-1)?.phase).toBe("cut-off");
    // Lifting the organizer's pause, which is not on, changes nothing.
    trainer.resume("organizer");
    expect(await holds(model)).toBe(true);
    expect(trainer.cutOff).toBe(true);
    trainer.resume("cut-off");
    expect(trainer.cutOff).toBe(false);
    await computed(model, model.computedWith.length + 3);
    expect(statuses.at(-1)?.phase).toBe("training");
    trainer.stop();
    await running;
  });

  it('needs both holds lifted when both are on, and says "paused" while the organizer\'s is', async () => {
    for (const first of ["organizer", "cut-off"] as const) {
      const { trainer, model, statuses } = setUp();
      const running = trainer.run();
      await computed(model, 2);
      trainer.pause("cut-off");
      trainer.pause("organizer");
      expect([trainer.paused, trainer.cutOff]).toEqual([true, true]);
      expect(statuses.at(-1)?.phase).toBe("paused");
      expect(await holds(model)).toBe(true);
      trainer.resume(first);
      // One hold is left: still held.
      expect(await holds(model)).toBe(true);
      expect(trainer.paused).toBe(first !== "organizer");
      expect(trainer.cutOff).toBe(first !== "cut-off");
      expect(statuses.at(-1)?.phase, `after lifting ${first}`).toBe(
        first === "organizer" ? "cut-off" : "paused",
      );
      trainer.resume(first === "organizer" ? "cut-off" : "organizer");
      expect([trainer.paused, trainer.cutOff]).toEqual([false, false]);
      await computed(model, model.computedWith.length + 3);
      trainer.stop();
      await expect(running).resolves.toMatchObject({ reason: "stopped" });
    }
  });

  it("holds while the volunteer pauses, apart from the organizer's pause", async () => {
    const { trainer, model, statuses } = setUp();
    const running = trainer.run();
    await computed(model, 2);
    trainer.pause("volunteer");
    expect(statuses.at(-1)?.phase).toBe("paused");
    // The volunteer's pause is not the organizer's: the run control's resume does not lift it.
    expect(trainer.paused).toBe(false);
    trainer.resume("organizer");
    expect(await holds(model)).toBe(true);
    trainer.resume("volunteer");
    await computed(model, model.computedWith.length + 2);
    expect(statuses.at(-1)?.phase).toBe("training");
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped" });
  });

  it("rests after each minibatch to keep to the use limit, and stops during a rest", async () => {
    expect(restAfter(100, 1)).toBe(0);
    expect(restAfter(100, 0.5)).toBe(100);
    expect(restAfter(100, 0.25)).toBe(300);
    // A minibatch of the bowl model takes well under a millisecond: at 1 % it would rest ~0, so the
    // test asks for a share that makes any minibatch of ≥ 0.05 ms rest ≥ 5 s.
    const { trainer, model } = setUp({ dutyCycle: () => 0.00001 });
    const running = trainer.run();
    await computed(model, 1);
    expect(await holds(model)).toBe(true);
    // The stop ends the rest: the run resolves now, not after it.
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped", minibatches: 1 });
  });

  it("ends a rest early when the volunteer raises the use limit, pauses, or the swarm reaches its target", async () => {
    // Each rest here is ≥ 5 s (see above); what ends one early is seen within a slice (200 ms).
    const soon = { timeout: 3_000 };
    let share = 0.00001;
    let held = false;
    const { trainer, model, swarm, statuses } = setUp({
      target: 1_000,
      dutyCycle: () => share,
      onHeld: (holding) => {
        held = holding;
      },
    });
    const running = trainer.run();
    await computed(model, 1);
    expect(await holds(model)).toBe(true);
    share = 1;
    await vi.waitFor(() => {
      expect(model.computedWith.length).toBeGreaterThanOrEqual(3);
    }, soon);
    share = 0.00001;
    expect(await holds(model)).toBe(true);
    trainer.pause("volunteer");
    // The status says "paused" at once; the rest ends and the trainer holds within a slice.
    expect(statuses.at(-1)?.phase).toBe("paused");
    await vi.waitFor(() => {
      expect(held).toBe(true);
    }, soon);
    const beforeResume = model.computedWith.length;
    trainer.resume("volunteer");
    await vi.waitFor(() => {
      expect(model.computedWith.length).toBeGreaterThan(beforeResume);
    }, soon);
    expect(await holds(model)).toBe(true);
    // The swarm reached its target during a rest: the peer goes to the round at once.
    swarm.target = 1;
    await vi.waitFor(() => {
      expect(swarm.averageCalls).toBeGreaterThan(0);
    }, soon);
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped" });
  });

  it("counts the process's whole CPU time against the use limit where the runtime tells it", async () => {
    let cpu = 0;
    const { trainer, model } = setUp({ target: 1_000, dutyCycle: () => 0.5, cpuTimeMs: () => cpu });
    const running = trainer.run();
    // No CPU used at all: nothing to rest for, however long the minibatches take.
    await computed(model, 5);
    // The process used 5 s of CPU besides (averaging, serving state): at 50 % it rests ~10 s.
    cpu += 5_000;
    expect(await holds(model)).toBe(true);
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped" });
  });

  it("holds from the start when paused before it runs, and stops while held", async () => {
    const { trainer, model, statuses } = setUp();
    trainer.pause("cut-off");
    const running = trainer.run();
    await turns(50);
    expect(model.computedWith).toEqual([]);
    expect(statuses.at(-1)?.phase).toBe("cut-off");
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped", minibatches: 0 });
  });

  it("carries what keeps the peer from the swarm in its status, and nothing when nothing does", async () => {
    let note: string | undefined =
      "refused by the swarm: the token this node joined with was revoked — create a new token";
    const { trainer, model, statuses } = setUp({ note: () => note });
    const running = trainer.run();
    await computed(model, 2);
    expect(statuses.at(-1)?.swarmNote).toBe(note);
    // Cut off: the status that says so carries the reason.
    note =
      "the swarm trains (3 peers alive) but this peer reaches none of its aux peers — check the firewall";
    trainer.pause("cut-off");
    expect(statuses.at(-1)).toMatchObject({ phase: "cut-off", swarmNote: note });
    note = undefined;
    trainer.resume("cut-off");
    await computed(model, model.computedWith.length + 2);
    expect(statuses.at(-1)).not.toHaveProperty("swarmNote");
    trainer.stop();
    await running;

    // A swarm view without a note: no swarmNote either.
    const plain = setUp();
    const plainRun = plain.trainer.run();
    await computed(plain.model, 2);
    expect(plain.statuses.every((status) => !("swarmNote" in status))).toBe(true);
    plain.trainer.stop();
    await plainRun;
  });

  it("says when it holds (after the round in flight) and when it trains again, not when it stops held", async () => {
    const held: boolean[] = [];
    const { trainer, model } = setUp({ onHeld: (holding) => held.push(holding) });
    const running = trainer.run();
    await computed(model, 2);
    trainer.pause("volunteer");
    expect(await holds(model)).toBe(true);
    expect(held).toEqual([true]);
    trainer.resume("volunteer");
    await computed(model, model.computedWith.length + 2);
    expect(held).toEqual([true, false]);
    trainer.pause("organizer");
    expect(await holds(model)).toBe(true);
    trainer.stop();
    await expect(running).resolves.toMatchObject({ reason: "stopped" });
    expect(held).toEqual([true, false, true]);
  });

  it("joins the round the swarm gathers for when the volunteer pauses with samples in it, then holds; not for the organizer's pause", async () => {
    for (const hold of ["volunteer", "organizer"] as const) {
      const held: boolean[] = [];
      // Target 8, minibatches of 4: the second brings the swarm to its target, and the pause comes then.
      const control: { trainer?: Trainer } = {};
      const { trainer, model, swarm, optimizer } = setUp({
        onHeld: (holding) => held.push(holding),
        onStatus: (status) => {
          if (status.phase === "training" && optimizer.samplesAccumulated === 8) control.trainer?.pause(hold);
        },
      });
      control.trainer = trainer;
      const running = trainer.run();
      await computed(model, 2);
      expect(await holds(model), hold).toBe(true);
      expect(held, hold).toEqual([true]);
      // The volunteer's pause put its 8 samples into the step; the organizer's holds everyone, so
      // nobody averages until it is lifted.
      expect([swarm.averageCalls, optimizer.epoch], hold).toEqual(hold === "volunteer" ? [1, 1] : [0, 0]);
      expect(model.computedWith.length, hold).toBe(2);
      trainer.stop();
      await running;
    }
  });
});
