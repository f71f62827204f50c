/**
 * One training peer of bench/diloco-utilization.ts, run in its own netlab namespace:
 * `node bench/support/diloco-peer.ts '<DilocoPeerSpec JSON>'`. It starts a `Swarm`, a
 * `CollaborativeOptimizer`, the real model and the real `Trainer` on the prepared shards, prints
 * JSON lines on stdout and takes JSON commands on stdin:
 *   → {"type":"ready", peerId, multiaddrs}   once listening (bootstrap peers dialled)
 *   → {"type":"meshed"}                      once connected to every other peer
 *   ← {"cmd":"train", startAt}               sleep until `startAt` (Unix ms), then train until the
 *   → {"type":"report", …}                     epoch reaches warm-up + measured rounds
 *   → {"type":"failed", message}             training threw
 *   ← {"cmd":"stop"}                         stop the swarm and exit 0 (stdin ending does the same)
 *
 * The report covers the measured window: from the moment this peer first reports epoch
 * `warmupRounds` (or a later one, after loading newer state) to the moment it first reports epoch
 * `warmupRounds + rounds` or later (with delayed updates the epoch moves on when a round starts,
 * otherwise when it ends; either way the window holds `rounds` whole cycles). `computeSeconds` is the time inside `model.computeGradients` within it;
 * `swarmSeconds` the time inside `optimizer.maybeStep` (a round in the foreground, matchmaking, a state
 * load: the training loop waiting on the swarm; with delayed updates a round only starts there),
 * `innerStepSeconds` the time inside `optimizer.accumulate` (DiLoCo's inner optimizer step, DeDLOC's
 * gradient sum, and the progress report each makes), `loadSeconds` the time inside
 * `model.setParameters` (the trainer reloads the working parameters whenever they changed: before
 * every minibatch with DiLoCo, after every step with DeDLOC), `dataSeconds` the time waiting for the
 * next minibatch from the shard stream.
 * After reporting, the peer stays in the swarm until told to stop, so that a slower peer can still
 * finish its last round or load the state from it.
 *
 * With `churn` (bench/diloco-churn.ts), it trains until it is stopped or killed and, instead of
 * the report, prints every 500 ms how far it has come, so that a peer killed mid-run has said
 * what it computed up to half a second before:
 *   → {"type":"tick", at, computeSeconds, samples, epoch, stepSamples}   (cumulative since `startAt`)
 * `stepSamples` counts the samples of this peer's that went into collaborative steps (the optimizer's
 * step events' `localSamples`), what a killed peer's lost work is measured against.
 */
import { createInterface } from "node:readline";
import { keyPairFromSecretKey, parseExperimentConfig } from "@barnraise/protocol";
import { AuthorityKeys, CollaborativeOptimizer, isSwarmError, Swarm } from "@barnraise/swarm";
import { pino } from "pino";
import { z } from "zod";
import {
  type Batch,
  createBatchStream,
  createModel,
  parseBackendChoice,
  selectNodeBackend,
} from "@barnraise/models/node";
import {
  LossReportingProgress,
  type ProgressSink,
} from "../../packages/volunteer/src/training/loss-reporting-progress.ts";
import { Trainer } from "../../packages/volunteer/src/training/trainer.ts";
import {
  isBenchModel,
  prepareBenchDataset,
  secondsWithin,
  timed,
  timedModel,
  type ComputeClock,
} from "./diloco-setup.ts";
import { bandwidthSchema, peerIdentityFields } from "./peer-spec.ts";
import { modelKindOf } from "@barnraise/models";

const specSchema = z.strictObject({
  ...peerIdentityFields,
  bandwidth: bandwidthSchema,
  /** An `ExperimentConfigInput`. */
  config: z.record(z.string(), z.unknown()),
  peers: z.number().int().min(2),
  dataDir: z.string(),
  backend: z.string(),
  initSeed: z.number().int(),
  dataSeed: z.number().int(),
  warmupRounds: z.number().int().min(0),
  rounds: z.number().int().min(1),
  /** Train until stopped, printing ticks instead of a report (see the file comment). */
  churn: z.boolean().optional(),
});
/** What the parent tells one peer process (argv[2], JSON). */
export type DilocoPeerSpec = z.infer<typeof specSchema>;

const commandSchema = z.discriminatedUnion("cmd", [
  z.strictObject({ cmd: z.literal("train"), startAt: z.number() }),
  z.strictObject({ cmd: z.literal("stop") }),
]);
export type DilocoPeerCommand = z.infer<typeof commandSchema>;

export const readySchema = z.object({
  type: z.literal("ready"),
  peerId: z.string(),
  multiaddrs: z.array(z.string()),
});
export const meshedSchema = z.object({ type: z.literal("meshed") });
export const reportSchema = z.object({
  type: z.literal("report"),
  /** The measured window, Unix ms. */
  windowStart: z.number(),
  windowEnd: z.number(),
  computeSeconds: z.number(),
  innerStepSeconds: z.number(),
  /** Time inside `optimizer.maybeStep`: the training loop waiting on the swarm (rounds, state loads). */
  swarmSeconds: z.number(),
  loadSeconds: z.number(),
  dataSeconds: z.number(),
  /** CPU seconds (user + system) this process used in the window. */
  cpuSeconds: z.number(),
  /** Minibatches whose computation ended within the window, and their samples. */
  minibatches: z.number(),
  samples: z.number(),
  /** Step events in the window: bytes this peer sent in their all-reduces, and their count. */
  bytesSent: z.number(),
  steps: z.number(),
  /** Rounds that failed on this peer during the whole run. */
  failedRounds: z.number(),
  /** Why they failed: the swarm error's code (or the message), and how often. */
  failureReasons: z.record(z.string(), z.number()),
  /** The whole run: from `startAt` to the last epoch's first report. */
  runSeconds: z.number(),
});
export type DilocoPeerReport = z.infer<typeof reportSchema>;
export const failedSchema = z.object({ type: z.literal("failed"), message: z.string() });
export const tickSchema = z.object({
  type: z.literal("tick"),
  /** Unix ms. */
  at: z.number(),
  computeSeconds: z.number(),
  /** Samples of the minibatches computed so far. */
  samples: z.number(),
  epoch: z.number(),
  stepSamples: z.number(),
});
export type DilocoPeerTick = z.infer<typeof tickSchema>;

const now = (): number => performance.timeOrigin + performance.now();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

function print(value: object): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

async function until(condition: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(20);
  }
}

/** The optimizer whose state this peer serves to others, once training has begun. */
interface Served {
  optimizer?: CollaborativeOptimizer;
}

async function train(
  spec: DilocoPeerSpec,
  swarm: Swarm,
  served: Served,
  startAt: number,
): Promise<DilocoPeerReport> {
  const config = parseExperimentConfig(spec.config);
  const preset = config.model.kind;
  if (!isBenchModel(preset)) throw new Error(`the DiLoCo benches train the presets only, not ${preset}`);
  const dataset = await prepareBenchDataset(spec.dataDir, preset);
  const clock: ComputeClock = { intervals: [] };
  const loadClock: ComputeClock = { intervals: [] };
  const model = timedModel(createModel(config.model), clock, loadClock);
  // The first time this peer reports each epoch or a later one (Unix ms, and CPU µs so far): the
  // window's edges.
  const epochSeen = new Map<number, number>();
  const cpuAt = new Map<number, number>();
  const sink: ProgressSink = {
    report: (progress) => {
      // An epoch skipped by loading newer state counts as reached when the later one is.
      for (let epoch = progress.epoch; epoch >= 0 && !epochSeen.has(epoch); epoch--) {
        epochSeen.set(epoch, now());
        const cpu = process.cpuUsage();
        cpuAt.set(epoch, cpu.user + cpu.system);
      }
      swarm.progress.report(progress);
    },
    global: () => swarm.progress.global(),
    globalBefore: (agoMs) => swarm.progress.globalBefore(agoMs),
    at: (epoch) => swarm.progress.at(epoch),
  };
  const progress = new LossReportingProgress(sink);
  const optimizer = new CollaborativeOptimizer({
    config,
    layout: model.layout,
    parameters: model.initialParameters(spec.initSeed),
    progress,
    averager: swarm.averagerPort(),
    state: swarm.statePort(),
  });
  served.optimizer = optimizer;
  const stepClock: ComputeClock = { intervals: [] };
  optimizer.accumulate = timed(stepClock, optimizer.accumulate.bind(optimizer));
  const swarmClock: ComputeClock = { intervals: [] };
  optimizer.maybeStep = timed(swarmClock, optimizer.maybeStep.bind(optimizer));
  const steps: Array<{ at: number; bytesSent: number }> = [];
  let stepSamples = 0;
  let failedRounds = 0;
  const failureReasons: Record<string, number> = {};
  optimizer.on((event) => {
    if (process.env.BENCH_DEBUG !== undefined) {
      const { error, ...rest } = event as { error?: unknown };
      const reason = error instanceof Error ? { reason: error.message } : {};
      process.stderr.write(`${JSON.stringify({ event: rest, at: now(), ...reason })}\n`);
    }
    if (event.type === "step") {
      steps.push({ at: now(), bytesSent: event.bytesSent ?? 0 });
      stepSamples += event.localSamples;
    }
    if (event.type === "round-failed") {
      failedRounds += 1;
      const reason = isSwarmError(event.error)
        ? event.error.code
        : event.error instanceof Error
          ? event.error.message
          : String(event.error);
      failureReasons[reason] = (failureReasons[reason] ?? 0) + 1;
    }
  });
  const batchSize = config.training.localBatchSize === "auto" ? 32 : config.training.localBatchSize;
  const dataClock: ComputeClock = { intervals: [] };
  const trainer = new Trainer({
    model,
    optimizer,
    progress,
    batches: timedBatches(
      createBatchStream({
        source: dataset.source,
        manifest: dataset.manifest,
        split: "train",
        batchSize,
        seed: spec.dataSeed + spec.index,
        config,
        kind: modelKindOf(config.model),
      }),
      dataClock,
    ),
    swarm: { global: () => swarm.progress.global(), peersOnline: () => spec.peers },
    seed: spec.dataSeed + spec.index,
    ...(spec.churn === true ? {} : { maxSteps: spec.warmupRounds + spec.rounds }),
  });
  await sleep(startAt - Date.now());
  progress.report({ epoch: optimizer.epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
  if (spec.churn === true) {
    const tick = () => {
      print({
        type: "tick",
        at: now(),
        computeSeconds: secondsWithin(clock, -Infinity, Infinity),
        samples: clock.intervals.length * batchSize,
        epoch: optimizer.epoch,
        stepSamples,
      });
    };
    tick();
    setInterval(tick, 500);
    await trainer.run();
    throw new Error("training ended before the peer was stopped");
  }
  await trainer.run();
  model.dispose();
  const windowStart = epochSeen.get(spec.warmupRounds);
  const windowEnd = epochSeen.get(spec.warmupRounds + spec.rounds);
  if (windowStart === undefined || windowEnd === undefined) {
    throw new Error(`never reported epochs ${spec.warmupRounds} and ${spec.warmupRounds + spec.rounds}`);
  }
  // The clock is performance.now(); the window is in Unix ms.
  const from = windowStart - performance.timeOrigin;
  const to = windowEnd - performance.timeOrigin;
  const minibatches = clock.intervals.filter(([, end]) => end > from && end <= to).length;
  const inWindow = steps.filter((step) => step.at > windowStart && step.at <= windowEnd);
  return {
    type: "report",
    windowStart,
    windowEnd,
    computeSeconds: secondsWithin(clock, from, to),
    innerStepSeconds: secondsWithin(stepClock, from, to),
    swarmSeconds: secondsWithin(swarmClock, from, to),
    loadSeconds: secondsWithin(loadClock, from, to),
    dataSeconds: secondsWithin(dataClock, from, to),
    cpuSeconds:
      ((cpuAt.get(spec.warmupRounds + spec.rounds) ?? NaN) - (cpuAt.get(spec.warmupRounds) ?? NaN)) / 1e6,
    minibatches,
    samples: minibatches * batchSize,
    bytesSent: inWindow.reduce((sum, step) => sum + step.bytesSent, 0),
    steps: inWindow.length,
    failedRounds,
    failureReasons,
    runSeconds: (windowEnd - startAt) / 1000,
  };
}

/** `batches`, with the time each `next()` takes added to `clock`. */
function timedBatches(batches: AsyncIterator<Batch>, clock: ComputeClock): AsyncIterator<Batch> {
  return { next: timed(clock, () => batches.next()) };
}

async function runPeer(spec: DilocoPeerSpec): Promise<void> {
  await selectNodeBackend(parseBackendChoice(spec.backend));
  const config = parseExperimentConfig(spec.config);
  const served: Served = {};
  const swarm = await Swarm.create({
    experimentId: spec.experimentId,
    identity: keyPairFromSecretKey(Buffer.from(spec.secretKey, "base64url")),
    authority: new AuthorityKeys({
      experimentId: spec.experimentId,
      publicKey: Buffer.from(spec.authorityPublicKey, "base64url"),
    }),
    pass: spec.pass,
    refreshPass: () => Promise.resolve(spec.pass),
    mode: "node",
    listen: spec.listen,
    bootstrap: spec.bootstrap,
    logger: pino({ level: process.env.BENCH_LOG ?? "warn" }, pino.destination(2)),
    config,
    getState: () => served.optimizer?.exportState() ?? null,
    bandwidth: spec.bandwidth,
  });
  const stop = (): void => {
    void swarm.stop().finally(() => process.exit(0));
  };
  await swarm.start();
  print({ type: "ready", peerId: swarm.peerId, multiaddrs: swarm.node.multiaddrs() });
  await until(() => swarm.node.members().length >= spec.peers - 1, "connected to every peer", 120_000);
  print({ type: "meshed" });
  createInterface({ input: process.stdin }).on("line", (line) => {
    const command = commandSchema.parse(JSON.parse(line));
    if (command.cmd === "stop") {
      stop();
      return;
    }
    train(spec, swarm, served, command.startAt).then(print, (error: unknown) => {
      process.stderr.write(`peer ${spec.index}: ${error instanceof Error ? error.stack : String(error)}\n`);
      print({ type: "failed", message: error instanceof Error ? error.message : String(error) });
    });
  });
  process.stdin.on("end", stop);
}

if (import.meta.main) {
  await runPeer(specSchema.parse(JSON.parse(process.argv[2] ?? "null")));
}
