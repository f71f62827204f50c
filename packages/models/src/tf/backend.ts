import * as tf from "@tensorflow/tfjs-core";
import { benchmarkBackend, formatGflops, type BackendBenchmark } from "./benchmark-backend.ts";

/**
 * Picks the TF.js backend a volunteer's machine trains on (DESIGN §5). "auto" takes the first of
 * tfjs-node-gpu, tfjs-node, WebAssembly and pure JS that works, then tries the GPU backends of the
 * runtime (WebGPU: Dawn in Node.js, the browser's own; WebGL in a browser) and keeps whichever
 * multiplies matrices fastest, measured here: a real GPU beats the CPU by far, while WebGPU or WebGL
 * on a software rasterizer is slower than wasm. How each package is loaded depends on the runtime:
 * the caller gives the loaders it has (`nodeBackendLoaders` in `@barnraise/models/node` import each
 * package dynamically, so a missing optional package is skipped, with the reason kept, instead of
 * crashing the peer). A backend without a loader is not one of this runtime's: asked for, it is
 * unavailable; "auto" passes over it without a word.
 *
 * TF.js has one global engine: selection switches the active backend for the whole process, so do
 * not run two selections at the same time.
 */

/** What the volunteer asks for (`--backend`). "auto" takes the fastest backend that loads. */
export type BackendChoice = "auto" | "gpu" | "webgpu" | "webgl" | "node" | "wasm" | "cpu";

/** A concrete backend, as reported to the volunteer. */
export type BackendName = "tensorflow-gpu" | "webgpu" | "webgl" | "tensorflow" | "wasm" | "cpu";

/** Every `--backend` value the command-line peer accepts (WebGL is a browser's). */
export const BACKEND_CHOICES: readonly Exclude<BackendChoice, "webgl">[] = [
  "auto",
  "gpu",
  "webgpu",
  "node",
  "wasm",
  "cpu",
];

/** Loads one backend package (registering its TF.js backend as a side effect). */
export type BackendLoader = () => Promise<unknown>;

export type BackendLoaders = Record<Exclude<BackendChoice, "auto">, BackendLoader>;

/** What the WebGPU loader resolves to: the adapter it found. */
export interface WebGpuAdapter {
  /** The native API under WebGPU (Dawn's backend: "vulkan", "metal", "d3d12" or "opengles"). */
  readonly api: string;
  readonly description: string;
}

/** The plain JavaScript backend, which loads in every runtime. */
export const cpuBackendLoader: BackendLoader = () => import("@tensorflow/tfjs-backend-cpu");

export interface SelectBackendOptions {
  /** How this runtime loads each backend; one without a loader is unavailable here. */
  readonly loaders: Partial<BackendLoaders>;
  /** Times the active backend, for "auto" to compare WebGPU with the other backend it found. */
  readonly measure?: () => Promise<BackendBenchmark>;
}

/** The backend now active in the TF.js engine, and why the others were passed over. */
export interface SelectedBackend {
  readonly choice: BackendChoice;
  readonly name: BackendName;
  readonly packageName: string;
  readonly skipped: readonly { readonly name: BackendName; readonly reason: string }[];
  /** What it runs on, where the backend says (WebGPU: Dawn's API and the adapter). */
  readonly device?: string;
  /** Its speed, when "auto" measured it to choose. */
  readonly benchmark?: BackendBenchmark;
}

/** `--backend` got a value that is not one of {@link BACKEND_CHOICES}. */
export class InvalidBackendChoiceError extends Error {
  override readonly name = "InvalidBackendChoiceError";
  readonly code = "INVALID_BACKEND_CHOICE";
  readonly text: string;

  constructor(text: string) {
    super(`unknown backend ${JSON.stringify(text)}: use one of ${BACKEND_CHOICES.join(", ")}`);
    this.text = text;
  }
}

/** The requested backend (or, for "auto", every backend) could not be loaded and activated. */
export class BackendUnavailableError extends Error {
  override readonly name = "BackendUnavailableError";
  readonly code = "BACKEND_UNAVAILABLE";
  readonly choice: BackendChoice;

  constructor(choice: BackendChoice, message: string, options: { cause: unknown }) {
    super(message, options);
    this.choice = choice;
  }
}

/** Parses a `--backend` value (case and surrounding spaces ignored); throws on anything else. */
export function parseBackendChoice(text: string): BackendChoice {
  const normalized = text.trim().toLowerCase();
  const found = BACKEND_CHOICES.find((choice) => choice === normalized);
  if (found === undefined) throw new InvalidBackendChoiceError(text);
  return found;
}

interface Candidate {
  readonly choice: Exclude<BackendChoice, "auto">;
  readonly name: BackendName;
  readonly packageName: string;
  /** The name the package registers in the TF.js engine. */
  readonly tfName: string;
  /** What to tell a volunteer who asked for exactly this backend and did not get it. */
  readonly advice: string;
}

const CANDIDATES: readonly Candidate[] = [
  {
    choice: "gpu",
    name: "tensorflow-gpu",
    packageName: "@tensorflow/tfjs-node-gpu",
    tfName: "tensorflow",
    advice:
      "install it with `npm install @tensorflow/tfjs-node-gpu` (Linux x64 with CUDA and cuDNN), " +
      "or run with --backend auto to use the fastest backend that works here",
  },
  {
    choice: "webgpu",
    name: "webgpu",
    packageName: "@tensorflow/tfjs-backend-webgpu",
    tfName: "webgpu",
    advice:
      "WebGPU needs a GPU driver Dawn can use (Vulkan, Metal or Direct3D 12; on Linux without one, " +
      "Mesa's EGL: libegl1 libegl-mesa0 libgles2), or run with --backend auto",
  },
  {
    choice: "webgl",
    name: "webgl",
    packageName: "@tensorflow/tfjs-backend-webgl",
    tfName: "webgl",
    advice: "WebGL needs a browser that has it enabled, or choose auto",
  },
  {
    choice: "node",
    name: "tensorflow",
    packageName: "@tensorflow/tfjs-node",
    tfName: "tensorflow",
    advice:
      "install it with `npm install @tensorflow/tfjs-node`, or run with --backend wasm " +
      "(or --backend auto to use the fastest backend that works here)",
  },
  {
    choice: "wasm",
    name: "wasm",
    packageName: "@tensorflow/tfjs-backend-wasm",
    tfName: "wasm",
    advice: "reinstall the peer's dependencies (`npm ci`), or run with --backend cpu",
  },
  {
    choice: "cpu",
    name: "cpu",
    packageName: "@tensorflow/tfjs-backend-cpu",
    tfName: "cpu",
    advice: "reinstall the peer's dependencies (`npm ci`)",
  },
];

/**
 * Loads and activates a backend. "auto" takes the first of gpu → node → wasm → cpu that works
 * (recording why each earlier one was skipped), then tries WebGPU and, when it works too, measures
 * both and keeps the faster. An explicit choice tries only that one and throws
 * {@link BackendUnavailableError} when it fails. On success the backend is the engine's active
 * backend and has computed a small sum correctly.
 */
export async function selectBackend(
  choice: BackendChoice,
  options: SelectBackendOptions,
): Promise<SelectedBackend> {
  const { loaders } = options;
  if (choice !== "auto") {
    const candidate = candidateFor(choice);
    try {
      const outcome = await activate(candidate, loaders[choice], false);
      return { choice, ...selection(candidate, outcome), skipped: [...outcome.skipped] };
    } catch (error) {
      const reason = describeFailure(error, candidate.packageName);
      throw new BackendUnavailableError(
        choice,
        `backend "${choice}" is unavailable: ${candidate.packageName} ${reason}; ${candidate.advice}`,
        { cause: error },
      );
    }
  }
  const skipped: { name: BackendName; reason: string }[] = [];
  const causes: unknown[] = [];
  const ofRuntime = CANDIDATES.filter((candidate) => loaders[candidate.choice] !== undefined);
  let found: { candidate: Candidate; outcome: Activation } | undefined;
  for (const candidate of ofRuntime.filter((c) => !GPU_CHOICES.has(c.choice))) {
    try {
      const outcome = await activate(candidate, loaders[candidate.choice], true);
      skipped.push(...outcome.skipped);
      found = { candidate, outcome };
      break;
    } catch (error) {
      skipped.push({ name: candidate.name, reason: describeFailure(error, candidate.packageName) });
      causes.push(error);
    }
  }
  // The GPU backends that work, each measured while it is active (the first found is measured last).
  const measure = options.measure ?? (() => benchmarkBackend());
  const contenders: Contender[] = [];
  for (const candidate of ofRuntime.filter((c) => GPU_CHOICES.has(c.choice))) {
    try {
      const outcome = await activate(candidate, loaders[candidate.choice], true);
      contenders.push({ candidate, outcome });
    } catch (error) {
      skipped.push({ name: candidate.name, reason: describeFailure(error, candidate.packageName) });
      causes.push(error);
    }
  }
  if (found === undefined && contenders.length === 0) {
    const reasons = skipped.map((s) => `${s.name}: ${s.reason}`).join("; ");
    throw new BackendUnavailableError(
      choice,
      `no TF.js backend could be loaded (${reasons || "this runtime has none"}); reinstall the peer's dependencies (\`npm ci\`)`,
      { cause: new AggregateError(causes, "every backend failed") },
    );
  }
  const only =
    contenders.length === 0
      ? found
      : found === undefined && contenders.length === 1
        ? contenders[0]
        : undefined;
  if (only !== undefined) {
    await useBackend(only.candidate.tfName);
    return { choice, ...selection(only.candidate, only.outcome), skipped };
  }
  // Several work: time each on the same matrix products and keep the fastest.
  const timed: Array<Contender & { speed: BackendBenchmark }> = [];
  for (const contender of [...contenders, ...(found === undefined ? [] : [found])]) {
    await useBackend(contender.candidate.tfName);
    timed.push({ ...contender, speed: await measure() });
  }
  // A GPU backend must be faster to win: on a tie the other one (measured last) stays.
  const winner = timed.reduceRight((best, next) => (next.speed.gflops > best.speed.gflops ? next : best));
  await useBackend(winner.candidate.tfName);
  for (const loser of timed.filter((contender) => contender !== winner)) {
    skipped.push({
      name: loser.outcome.name,
      reason: `measured ${formatGflops(loser.speed.gflops)} GFLOP/s against ${winner.outcome.name}'s ${formatGflops(winner.speed.gflops)}`,
    });
  }
  return { choice, ...selection(winner.candidate, winner.outcome), skipped, benchmark: winner.speed };
}

/** The GPU backends "auto" measures against the first other backend that works. */
const GPU_CHOICES: ReadonlySet<BackendChoice> = new Set(["webgpu", "webgl"]);

interface Contender {
  readonly candidate: Candidate;
  readonly outcome: Activation;
}

function candidateFor(choice: Exclude<BackendChoice, "auto">): Candidate {
  const candidate = CANDIDATES.find((c) => c.choice === choice);
  if (candidate === undefined) throw new Error(`no backend candidate for ${choice}`);
  return candidate;
}

function selection(
  candidate: Candidate,
  outcome: Activation,
): Pick<SelectedBackend, "name" | "packageName" | "device"> {
  return {
    name: outcome.name,
    packageName: candidate.packageName,
    ...(outcome.device === undefined ? {} : { device: outcome.device }),
  };
}

async function useBackend(tfName: string): Promise<void> {
  if (!(await tf.setBackend(tfName))) throw new Error(`TF.js could not switch back to "${tfName}"`);
  await tf.ready();
}

interface Activation {
  readonly name: BackendName;
  readonly skipped: readonly { name: BackendName; reason: string }[];
  readonly device?: string;
}

/** Loads one candidate's package, makes it the active backend and checks that it computes. */
async function activate(
  candidate: Candidate,
  load: BackendLoader | undefined,
  auto: boolean,
): Promise<Activation> {
  if (load === undefined) throw new LoadFailure("is not available in this runtime");
  let loaded: unknown;
  try {
    loaded = await load();
  } catch (error) {
    throw new LoadFailure(describeLoadError(error, candidate.packageName), error);
  }
  if (!tf.engine().backendNames().includes(candidate.tfName)) {
    throw new LoadFailure(`loaded but registered no "${candidate.tfName}" TF.js backend`);
  }
  const switched = await tf.setBackend(candidate.tfName);
  await tf.ready();
  if (!switched || tf.getBackend() !== candidate.tfName) {
    throw new LoadFailure(`loaded but its "${candidate.tfName}" backend failed to initialize`);
  }
  await checkArithmetic(candidate.tfName);
  if (candidate.choice === "webgpu") {
    const adapter = loaded as Partial<WebGpuAdapter> | undefined;
    const device = adapter?.api === undefined ? undefined : `${adapter.api}: ${adapter.description ?? ""}`;
    return { name: candidate.name, skipped: [], ...(device === undefined ? {} : { device }) };
  }
  if (candidate.choice !== "gpu") return { name: candidate.name, skipped: [] };
  // tfjs-node-gpu falls back to TensorFlow's CPU kernels when it finds no usable GPU; its backend
  // says which through `isUsingGpuDevice`. When it cannot tell us, trust the package name.
  const backend = tf.backend();
  const usingGpu = "isUsingGpuDevice" in backend ? backend.isUsingGpuDevice : undefined;
  if (usingGpu !== false) return { name: "tensorflow-gpu", skipped: [] };
  const reason = "loaded but TensorFlow found no usable GPU (check the CUDA and cuDNN install)";
  if (!auto) throw new LoadFailure(reason);
  // Same native TensorFlow on its CPU kernels: as fast as tfjs-node, which would clash with it.
  return { name: "tensorflow", skipped: [{ name: "tensorflow-gpu", reason }] };
}

/** A candidate failed for a reason already phrased for the volunteer. */
class LoadFailure extends Error {
  override readonly name = "LoadFailure";
  constructor(reason: string, cause?: unknown) {
    super(reason, { cause });
  }
}

/**
 * Fails when the active backend cannot add two vectors correctly: large enough (1024) that a GPU
 * backend computes on the GPU rather than handing the work to its CPU kernels. Leaks no tensors.
 */
async function checkArithmetic(tfName: string): Promise<void> {
  const size = 1024;
  const sum = tf.tidy(() => tf.add(tf.range(0, size, 1, "float32"), tf.fill([size], 3)));
  try {
    const values = await sum.data();
    const wrong = values.findIndex((value, index) => value !== index + 3);
    if (wrong >= 0) {
      throw new LoadFailure(`"${tfName}" computed ${wrong} + 3 = ${values[wrong]}`);
    }
  } finally {
    sum.dispose();
  }
}

function describeFailure(error: unknown, packageName: string): string {
  return error instanceof LoadFailure ? error.message : describeLoadError(error, packageName);
}

/** "not installed" for a missing package, otherwise the first line of the error. */
function describeLoadError(error: unknown, packageName: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
  const missingCode = code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND";
  if (missingCode && message.includes(`'${packageName}'`)) return "not installed";
  return `failed to load: ${message.split("\n", 1)[0] ?? ""}`;
}

/**
 * One line for the start-up report, e.g.
 * "backend: wasm (@tensorflow/tfjs-backend-wasm) — 27.1 GFLOP/s; skipped tensorflow-gpu: not installed, …".
 */
export function describeBackend(selected: SelectedBackend, bench?: BackendBenchmark): string {
  const on = selected.device === undefined ? "" : `, ${selected.device}`;
  let line = `backend: ${selected.name} (${selected.packageName}${on})`;
  if (bench !== undefined) line += ` — ${formatGflops(bench.gflops)} GFLOP/s`;
  if (selected.choice !== "auto") line += ` (chosen with --backend ${selected.choice})`;
  if (selected.skipped.length > 0) {
    line += `; skipped ${selected.skipped.map((s) => `${s.name}: ${s.reason}`).join(", ")}`;
  }
  return line;
}
