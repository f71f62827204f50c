import * as tf from "@tensorflow/tfjs-core";
import { benchmarkBackend, formatGflops, type BackendBenchmark } from "./benchmark-backend.ts";

/**
 * Picks the TF.js backend a volunteer's machine trains on (DESIGN §5). "auto" takes the first of
 * tfjs-node-gpu, tfjs-node, WebAssembly and pure JS that works, then tries WebGPU (Dawn) and keeps
 * whichever of the two multiplies matrices faster, measured here: a real GPU beats the CPU by far,
 * while WebGPU on a software rasterizer is slower than wasm. How each package is loaded depends on
 * the runtime: the caller gives the loaders (`nodeBackendLoaders` in `@barnraise/models/node` import
 * each package dynamically, so a missing optional package is skipped, with the reason kept, instead
 * of crashing the peer). A backend without a loader is unavailable.
 *
 * TF.js has one global engine: selection switches the active backend for the whole process, so do
 * not run two selections at the same time.
 */

/** What the volunteer asks for with `--backend`. "auto" takes the fastest backend that loads. */
export type BackendChoice = "auto" | "gpu" | "webgpu" | "node" | "wasm" | "cpu";

/** A concrete backend, as reported to the volunteer. */
export type BackendName = "tensorflow-gpu" | "webgpu" | "tensorflow" | "wasm" | "cpu";

/** Every accepted `--backend` value. */
export const BACKEND_CHOICES: readonly BackendChoice[] = ["auto", "gpu", "webgpu", "node", "wasm", "cpu"];

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
  let found: { candidate: Candidate; outcome: Activation } | undefined;
  for (const candidate of CANDIDATES.filter((c) => c.choice !== "webgpu")) {
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
  const webgpu = candidateFor("webgpu");
  let gpuOutcome: Activation | undefined;
  try {
    gpuOutcome = await activate(webgpu, loaders.webgpu, true);
  } catch (error) {
    skipped.push({ name: webgpu.name, reason: describeFailure(error, webgpu.packageName) });
    causes.push(error);
  }
  if (found === undefined) {
    if (gpuOutcome !== undefined) return { choice, ...selection(webgpu, gpuOutcome), skipped };
    const reasons = skipped.map((s) => `${s.name}: ${s.reason}`).join("; ");
    throw new BackendUnavailableError(
      choice,
      `no TF.js backend could be loaded (${reasons}); reinstall the peer's dependencies (\`npm ci\`)`,
      { cause: new AggregateError(causes, "every backend failed") },
    );
  }
  if (gpuOutcome === undefined) {
    await useBackend(found.candidate.tfName);
    return { choice, ...selection(found.candidate, found.outcome), skipped };
  }
  // Both work: time each on the same matrix products and keep the faster.
  const measure = options.measure ?? (() => benchmarkBackend());
  const gpuSpeed = await measure();
  await useBackend(found.candidate.tfName);
  const otherSpeed = await measure();
  const [winner, loser] =
    gpuSpeed.gflops > otherSpeed.gflops
      ? [
          { candidate: webgpu, outcome: gpuOutcome, speed: gpuSpeed },
          { ...found, speed: otherSpeed },
        ]
      : [
          { ...found, speed: otherSpeed },
          { candidate: webgpu, outcome: gpuOutcome, speed: gpuSpeed },
        ];
  await useBackend(winner.candidate.tfName);
  skipped.push({
    name: loser.outcome.name,
    reason: `measured ${formatGflops(loser.speed.gflops)} GFLOP/s against ${winner.outcome.name}'s ${formatGflops(winner.speed.gflops)}`,
  });
  return { choice, ...selection(winner.candidate, winner.outcome), skipped, benchmark: winner.speed };
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
