/**
 * Gradient compression codecs: size, accuracy and speed, measured in one run.
 *
 *   node bench/compression-table.ts [minMillisPerMeasurement]
 *
 * For vectors of 1,024 / 65,536 / 1,048,576 float32 elements drawn (seeded) from a standard normal
 * and from a heavy-tailed Student-t with 3 degrees of freedom, prints one table per codec:
 * compression ratio (raw float32 bytes / encoded bytes), relative RMSE ‖x̂ − x‖ / ‖x‖, max absolute
 * error, and encode / decode throughput in MB of raw float32 per second (one core).
 * `topk` runs at the config's default density (1.5 %); `sparse`, which only carries a topk round's
 * results, is measured on what it gets there: the mean of 4 topk-decoded vectors of the same kind.
 */
import { availableParallelism, loadavg } from "node:os";
import {
  CODEC_NAMES,
  compressorFor,
  decompress,
  type CodecName,
} from "../packages/swarm/src/compression/index.ts";
import { seededRandom as rng } from "../packages/swarm/test/support/seeded-random.ts";

const minMillis = Number(process.argv[2] ?? 150);
const SIZES = [1024, 65_536, 1_048_576];

function gaussian(next: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - next())) * Math.cos(2 * Math.PI * next());
}

const DISTRIBUTIONS: Record<string, (n: number, seed: number) => Float32Array> = {
  normal: (n, seed) => {
    const next = rng(seed);
    return Float32Array.from({ length: n }, () => gaussian(next));
  },
  "student-t(3)": (n, seed) => {
    const next = rng(seed);
    return Float32Array.from({ length: n }, () => {
      const chiSquare = gaussian(next) ** 2 + gaussian(next) ** 2 + gaussian(next) ** 2;
      return gaussian(next) / Math.sqrt(chiSquare / 3);
    });
  },
};

/**
 * Raw-float32 megabytes per second of `run`: batches of repetitions lasting ≥ 5 ms each, run for
 * `minMillis` (at least 5 batches), and the fastest batch counts, so a busy machine's pauses
 * (other processes, GC) distort the figure as little as possible.
 */
function throughput(elements: number, run: () => void): number {
  run(); // warm-up
  let perBatch = 1;
  for (;;) {
    const start = performance.now();
    for (let i = 0; i < perBatch; i++) run();
    if (performance.now() - start >= 5) break;
    perBatch *= 2;
  }
  let best = Infinity;
  const start = performance.now();
  for (let batch = 0; batch < 5 || performance.now() - start < minMillis; batch++) {
    const batchStart = performance.now();
    for (let i = 0; i < perBatch; i++) run();
    best = Math.min(best, (performance.now() - batchStart) / perBatch);
  }
  return (elements * 4) / 1e6 / (best / 1000);
}

interface Row {
  distribution: string;
  size: number;
  ratio: number;
  relativeRmse: number;
  maxAbsError: number;
  encodeMBps: number;
  decodeMBps: number;
}

/** The mean of 4 topk-decoded vectors from `generate`: a topk round's result, the input of "sparse". */
function topkMean(
  generate: (n: number, seed: number) => Float32Array,
  n: number,
  seed: number,
): Float32Array {
  const topk = compressorFor("topk", n);
  const sum = new Float64Array(n);
  for (let member = 0; member < 4; member++) {
    const sent = decompress(topk.compress(generate(n, seed + member)), n);
    for (let i = 0; i < n; i++) sum[i] = (sum[i] ?? 0) + (sent[i] ?? 0);
  }
  return Float32Array.from(sum, (x) => x / 4);
}

function measure(name: CodecName, distribution: string, values: Float32Array): Row {
  const compressor = compressorFor(name, values.length);
  const bytes = compressor.compress(values);
  const decoded = decompress(bytes, values.length);
  let squaredError = 0;
  let squaredNorm = 0;
  let maxAbsError = 0;
  for (let i = 0; i < values.length; i++) {
    const x = values[i] ?? 0;
    const error = Math.abs(x - (decoded[i] ?? 0));
    squaredError += error * error;
    squaredNorm += x * x;
    if (error > maxAbsError) maxAbsError = error;
  }
  return {
    distribution,
    size: values.length,
    ratio: (values.length * 4) / bytes.length,
    relativeRmse: Math.sqrt(squaredError / squaredNorm),
    maxAbsError,
    encodeMBps: throughput(values.length, () => compressor.compress(values)),
    decodeMBps: throughput(values.length, () => decompress(bytes, values.length)),
  };
}

function format(rows: Row[]): string {
  const header = ["distribution", "elements", "ratio", "rel. RMSE", "max |err|", "enc MB/s", "dec MB/s"];
  const cells = rows.map((row) => [
    row.distribution,
    row.size.toLocaleString("en-US"),
    `${row.ratio.toFixed(2)}×`,
    row.relativeRmse === 0 ? "0" : row.relativeRmse.toExponential(2),
    row.maxAbsError === 0 ? "0" : row.maxAbsError.toExponential(2),
    row.encodeMBps.toFixed(0),
    row.decodeMBps.toFixed(0),
  ]);
  const widths = header.map((title, column) =>
    Math.max(title.length, ...cells.map((cell) => (cell[column] ?? "").length)),
  );
  const line = (cell: string[]): string =>
    cell
      .map((text, column) =>
        column === 0 ? text.padEnd(widths[column] ?? 0) : text.padStart(widths[column] ?? 0),
      )
      .join("  ");
  return [line(header), widths.map((width) => "-".repeat(width)).join("  "), ...cells.map(line)].join("\n");
}

const inputs = Object.entries(DISTRIBUTIONS).flatMap(([distribution, generate], d) =>
  SIZES.map((size) => ({
    distribution,
    values: generate(size, 1000 * d + size),
    topkMean: topkMean(generate, size, 1000 * d + size),
  })),
);
console.log(
  `Node ${process.version}, one core, ≥ ${minMillis} ms per throughput figure (fastest batch), ` +
    `load average ${loadavg()[0]?.toFixed(1)} on ${availableParallelism()} cores\n`,
);
for (const name of CODEC_NAMES) {
  console.log(
    `${name}\n${format(
      inputs.map(({ distribution, values, topkMean: mean }) =>
        name === "sparse"
          ? measure(name, `4×topk ${distribution}`, mean)
          : measure(name, distribution, values),
      ),
    )}\n`,
  );
}
console.log('"adaptive" (the default) is fp16 below 65,536 elements and blockwise8 from there on.');
console.log(
  "topk's error is one round's: with error feedback what it drops is sent in later rounds. sparse " +
    "keeps every nonzero; its error is fp16 rounding alone.",
);
