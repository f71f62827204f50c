import * as tf from "@tensorflow/tfjs-core";

/**
 * A quick matrix-multiply benchmark of the active TF.js backend, run at start-up so the volunteer
 * (and the logs) see how fast this machine is. It is a rough figure, not a measurement to compare
 * across runs: 256×256 keeps it well under a second even on the pure-JS backend.
 */

export interface BenchmarkOptions {
  /** Side of the square matrices (default 256). */
  readonly matmulSize?: number;
  /** Untimed runs first, so kernel compilation and allocation are not counted (default 2). */
  readonly warmupRuns?: number;
  /** Timed runs (default 8). */
  readonly runs?: number;
}

export interface BackendBenchmark {
  /** Billions of floating-point operations per second (a matmul of size n costs 2·n³). */
  readonly gflops: number;
  readonly matmulSize: number;
  readonly runs: number;
  /** Wall time of the timed runs together. */
  readonly milliseconds: number;
}

const LIMITS = {
  matmulSize: { min: 1, max: 4096, fallback: 256 },
  warmupRuns: { min: 0, max: 100, fallback: 2 },
  runs: { min: 1, max: 1000, fallback: 8 },
} as const;

/** Times `runs` square matmuls on the active backend, waiting for each result. Disposes every tensor. */
export async function benchmarkBackend(options: BenchmarkOptions = {}): Promise<BackendBenchmark> {
  const matmulSize = checkedOption("matmulSize", options.matmulSize);
  const warmupRuns = checkedOption("warmupRuns", options.warmupRuns);
  const runs = checkedOption("runs", options.runs);
  const shape: [number, number] = [matmulSize, matmulSize];
  const a = tf.randomUniform(shape, -1, 1, "float32", 1);
  const b = tf.randomUniform(shape, -1, 1, "float32", 2);
  try {
    for (let i = 0; i < warmupRuns; i++) await multiplyAndWait(a, b);
    const started = performance.now();
    for (let i = 0; i < runs; i++) await multiplyAndWait(a, b);
    // A timer can read 0 for very fast runs; keep the rate finite.
    const milliseconds = Math.max(performance.now() - started, 1e-3);
    const flops = 2 * matmulSize ** 3 * runs;
    return { gflops: flops / (milliseconds * 1e6), matmulSize, runs, milliseconds };
  } finally {
    a.dispose();
    b.dispose();
  }
}

/** One matmul, read back so asynchronous backends have really finished it. */
async function multiplyAndWait(a: tf.Tensor, b: tf.Tensor): Promise<void> {
  const product = tf.matMul(a, b);
  try {
    await product.data();
  } finally {
    product.dispose();
  }
}

function checkedOption(name: keyof typeof LIMITS, value: number | undefined): number {
  const { min, max, fallback } = LIMITS[name];
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`benchmark ${name} must be an integer from ${min} to ${max}, got ${value}`);
  }
  return value;
}

/** Three significant digits without exponents: 0.0123, 1.23, 27.1, 1234. */
export function formatGflops(gflops: number): string {
  return gflops >= 100 ? gflops.toFixed(0) : gflops.toPrecision(3);
}
