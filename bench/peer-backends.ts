/**
 * Training speed of the volunteer peer's TF.js backends: WebAssembly against pure JavaScript, or
 * WebGPU against WebAssembly.
 *
 *   node bench/peer-backends.ts [--backends wasm,cpu] [--runs 7] [--min-ms 300] [--warmup 3] [--batch-scale 1]
 *
 * `--batch-scale K` multiplies each workload's batch (a GPU needs larger batches to pay off).
 *
 * For each backend, one child process (TF.js has one global engine per process) selects it as
 * `barnraise-peer --backend <name>` does (production mode), then, for each workload, builds the
 * model, sets its initial parameters and times `computeGradients` (forward, backward and the
 * gradient read back into a Float32Array, what the trainer does per minibatch) on one synthetic
 * batch of the preset's exact shape: `--warmup` untimed steps, then `--runs` timed runs of as many
 * steps as take at least `--min-ms`. The children run one after the other, so they never share
 * the cores.
 *
 * Workloads: mnist-mlp with the preset's default config (784 → 128 → 64 → 10) on batches of 32,
 * and a small albert-mlm (vocabulary 1024, embeddings 32, hidden 64, 2 layers, 2 heads, 32 tokens,
 * dropout 0.1) on batches of 8 sentences.
 *
 * Columns: "params" the model's parameter count; "<backend> samples/s" the median over the timed
 * runs of samples per second, with the slowest and fastest run in brackets; "a/b" the ratio of
 * the medians of the first two backends. A workload the backend cannot run (e.g. a kernel it does not register) is shown as
 * "unsupported", with the reason below the table.
 */
import { spawn } from "node:child_process";
import { availableParallelism, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { parseExperimentConfig, type ModelConfig } from "@barnraise/protocol";
import * as tf from "@tensorflow/tfjs-core";
import { z } from "zod";
import {
  createModel,
  parseBackendChoice,
  selectNodeBackend,
  syntheticBatch,
  type TrainableModel,
} from "@barnraise/models/node";
import { onBenchExit } from "./support/peer-cleanup.ts";
import { firstLine, formatCount, formatTable, median } from "./support/peer-table.ts";
import { modelKindOf } from "@barnraise/models";

interface Workload {
  readonly name: string;
  readonly batchSize: number;
  readonly model: ModelConfig;
}

const WORKLOADS: readonly Workload[] = [
  {
    name: "mnist-mlp",
    batchSize: 32,
    model: parseExperimentConfig({ model: { kind: "mnist-mlp" } }).model,
  },
  {
    name: "albert-mlm (small)",
    batchSize: 8,
    model: parseExperimentConfig({
      model: {
        kind: "albert-mlm",
        vocabSize: 1024,
        embeddingSize: 32,
        hiddenSize: 64,
        numLayers: 2,
        numHeads: 2,
        intermediateSize: 128,
        maxSequenceLength: 32,
        dropout: 0.1,
      },
    }).model,
  },
];

/** How long one backend's child may take before the bench gives up on it. */
const CHILD_TIMEOUT_MS = 10 * 60_000;
const SCRIPT = fileURLToPath(import.meta.url);

const measuredSchema = z.object({
  status: z.literal("measured"),
  parameters: z.number(),
  runs: z.array(z.number()),
  stepsPerRun: z.number(),
  leakedTensors: z.number(),
});
const unsupportedSchema = z.object({ status: z.literal("unsupported"), reason: z.string() });
const workloadResultSchema = z.discriminatedUnion("status", [measuredSchema, unsupportedSchema]);
type WorkloadResult = z.infer<typeof workloadResultSchema>;

const childReportSchema = z.object({
  type: z.literal("backend-report"),
  backend: z.string(),
  packageName: z.string(),
  tfjsVersion: z.string(),
  results: z.array(workloadResultSchema),
});
type ChildReport = z.infer<typeof childReportSchema>;
/** The child could not select its backend (e.g. an optional package that is not installed). */
const childFailureSchema = z.object({ type: z.literal("backend-failed"), message: z.string() });
const childLineSchema = z.discriminatedUnion("type", [childReportSchema, childFailureSchema]);
type ChildLine = z.infer<typeof childLineSchema>;

const { values: flags } = parseArgs({
  options: {
    backends: { type: "string", default: "wasm,cpu" },
    runs: { type: "string", default: "7" },
    "min-ms": { type: "string", default: "300" },
    warmup: { type: "string", default: "3" },
    "batch-scale": { type: "string", default: "1" },
    child: { type: "string" },
  },
});
const runs = positiveInteger("runs", flags.runs);
const minMs = positiveInteger("min-ms", flags["min-ms"]);
const warmup = positiveInteger("warmup", flags.warmup);
const batchScale = positiveInteger("batch-scale", flags["batch-scale"]);
const workloads = WORKLOADS.map((workload) => ({ ...workload, batchSize: workload.batchSize * batchScale }));

function positiveInteger(name: string, text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`--${name} must be a positive integer, got ${JSON.stringify(text)}`);
  }
  return value;
}

// ------------------------------------------------------------------ child: one backend

/** Times one workload on the active backend; a workload that throws is "unsupported", not a crash. */
async function measureWorkload(workload: Workload): Promise<WorkloadResult> {
  const tensorsBefore = tf.memory().numTensors;
  let model: TrainableModel | undefined;
  try {
    model = createModel(workload.model);
    model.setParameters(model.initialParameters(1));
    const batch = syntheticBatch(modelKindOf(workload.model), workload.batchSize, 1);
    let seed = 1;
    const warmupMs: number[] = [];
    for (let i = 0; i < warmup; i++) {
      const started = performance.now();
      await model.computeGradients(batch, seed++);
      warmupMs.push(performance.now() - started);
    }
    // Enough steps per run that timer resolution and one GC pause weigh little.
    const stepsPerRun = Math.max(1, Math.ceil(minMs / Math.max(median(warmupMs), 0.01)));
    const rates: number[] = [];
    for (let run = 0; run < runs; run++) {
      const started = performance.now();
      for (let step = 0; step < stepsPerRun; step++) await model.computeGradients(batch, seed++);
      const seconds = (performance.now() - started) / 1000;
      rates.push((stepsPerRun * workload.batchSize) / seconds);
    }
    const parameters = model.layout.size;
    model.dispose();
    model = undefined;
    return {
      status: "measured",
      parameters,
      runs: rates,
      stepsPerRun,
      leakedTensors: tf.memory().numTensors - tensorsBefore,
    };
  } catch (error) {
    return { status: "unsupported", reason: firstLine(error) };
  } finally {
    model?.dispose();
  }
}

async function runChild(choice: string): Promise<void> {
  tf.enableProdMode();
  let selected;
  try {
    selected = await selectNodeBackend(parseBackendChoice(choice));
  } catch (error) {
    const failure: ChildLine = { type: "backend-failed", message: firstLine(error) };
    process.stdout.write(`${JSON.stringify(failure)}\n`);
    return;
  }
  const report: ChildReport = {
    type: "backend-report",
    backend: selected.name,
    packageName: selected.packageName,
    tfjsVersion: tf.version_core,
    results: await measureWorkloads(),
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

/** The workloads one after the other (never two at once on one engine). */
async function measureWorkloads(): Promise<WorkloadResult[]> {
  const results: WorkloadResult[] = [];
  for (const workload of workloads) results.push(await measureWorkload(workload));
  return results;
}

// ------------------------------------------------------------------ parent: spawn and summarize

/** Runs one backend's child and returns its report; throws with the child's output if it fails. */
async function measureBackend(backend: string): Promise<ChildReport> {
  const child = spawn(
    process.execPath,
    [
      SCRIPT,
      "--child",
      backend,
      "--runs",
      String(runs),
      "--min-ms",
      String(minMs),
      "--warmup",
      String(warmup),
      "--batch-scale",
      String(batchScale),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const forget = onBenchExit(() => child.kill("SIGKILL"));
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  // An object, not a `let`: the flag is set in a callback, which narrowing cannot see.
  const watchdog = { fired: false };
  const timer = setTimeout(() => {
    watchdog.fired = true;
    child.kill("SIGKILL");
  }, CHILD_TIMEOUT_MS);
  try {
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", reject);
      child.once("close", (exitCode, exitSignal) => {
        resolve([exitCode, exitSignal]);
      });
    });
    const line = stdout.split("\n").find((text) => text.startsWith('{"type":"backend-'));
    const parsed = line === undefined ? undefined : childLineSchema.safeParse(JSON.parse(line));
    if (parsed?.data?.type === "backend-failed") throw new Error(parsed.data.message);
    if (code !== 0 || parsed?.success !== true) {
      const how = signal === null ? `exited with ${code}` : `was killed by ${signal}`;
      throw new Error(
        `the ${backend} child ${how}${watchdog.fired ? ` after ${CHILD_TIMEOUT_MS / 1000} s` : ""} without a report\n--- stderr (tail):\n${stderr.slice(-3000)}` +
          `\n--- stdout (tail):\n${stdout.slice(-1000)}`,
      );
    }
    return parsed.data;
  } finally {
    clearTimeout(timer);
    forget();
  }
}

function describeRate(result: WorkloadResult | undefined): string {
  if (result === undefined) return "-";
  if (result.status === "unsupported") return "unsupported";
  const rates = result.runs;
  return `${formatCount(median(rates))} [${formatCount(Math.min(...rates))}–${formatCount(Math.max(...rates))}]`;
}

function medianRate(result: WorkloadResult | undefined): number | undefined {
  return result?.status === "measured" ? median(result.runs) : undefined;
}

async function runParent(): Promise<void> {
  const backends = flags.backends.split(",").map((name) => parseBackendChoice(name));
  if (backends.includes("auto")) throw new RangeError("--backends takes concrete backends, not auto");
  console.log(
    `Node ${process.version}, ${availableParallelism()} cores, load average ${loadavg()[0]?.toFixed(1)}; ` +
      `${warmup} warm-up steps, median of ${runs} runs of ≥ ${minMs} ms; one child process per backend`,
  );
  const reports: ChildReport[] = [];
  const failures: string[] = [];
  for (const backend of backends) {
    console.log(`measuring ${backend} …`);
    try {
      reports.push(await measureBackend(backend));
    } catch (error) {
      // One backend that cannot run must not hide the others' figures.
      failures.push(`${backend}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  const first = reports[0];
  if (first !== undefined) console.log(`TF.js ${first.tfjsVersion}`);

  // The first two backends measured, compared: wasm/cpu by default, webgpu/wasm on a GPU.
  const [top, bottom] = reports;
  const ratioName =
    top !== undefined && bottom !== undefined ? `${top.backend}/${bottom.backend}` : undefined;
  const showRatio = ratioName !== undefined;
  const header = [
    "workload",
    "batch",
    "params",
    ...reports.map((report) => `${report.backend} samples/s`),
    ...(ratioName === undefined ? [] : [ratioName]),
  ];
  const rows = workloads.map((workload, w) => {
    const results = reports.map((report) => report.results[w]);
    const parameters = results.find((result) => result?.status === "measured");
    const ratio = (): string => {
      const above = medianRate(top?.results[w]);
      const below = medianRate(bottom?.results[w]);
      return above === undefined || below === undefined ? "-" : `${(above / below).toFixed(2)}×`;
    };
    return [
      workload.name,
      String(workload.batchSize),
      parameters?.status === "measured" ? formatCount(parameters.parameters) : "-",
      ...results.map(describeRate),
      ...(showRatio ? [ratio()] : []),
    ];
  });
  console.log();
  for (const line of formatTable(header, rows)) console.log(line);
  console.log();
  for (const report of reports) {
    report.results.forEach((result, w) => {
      const name = workloads[w]?.name ?? `workload ${w}`;
      if (result.status === "unsupported") {
        console.log(`${report.backend}, ${name}: unsupported: ${result.reason}`);
      } else if (result.leakedTensors !== 0) {
        console.log(
          `${report.backend}, ${name}: ${result.leakedTensors} tensors leaked (the figures still stand)`,
        );
      }
    });
  }
  console.log(
    "samples/s: median [slowest–fastest run] of computeGradients on one synthetic batch (forward, backward, " +
      `gradient read back)${showRatio ? `; ${ratioName}: ratio of the medians` : ""}.`,
  );
  for (const failure of failures) console.log(`FAILED ${failure}`);
  if (failures.length > 0) process.exitCode = 1;
}

if (flags.child === undefined) {
  await runParent();
} else {
  await runChild(flags.child);
}
