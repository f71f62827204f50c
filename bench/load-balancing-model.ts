/**
 * Modelled butterfly all-reduce time with uniform and with LP-optimal parts for the set-ups of
 * DeDLOC Table 1 (ResNet-50 averaging), next to the speed-up the paper measured.
 *
 *   node bench/load-balancing-model.ts [solves]
 *
 * The model is the one `optimalPartFractions` optimizes (each peer limited by its slower link, no
 * latency, transfers fully overlapped); the real network bench with tc comes separately. "LP ms"
 * is the fastest and the median time of one `optimalPartFractions` call (two HiGHS solves) once
 * the Wasm module is loaded (the median suffers first on a busy machine); DeDLOC reports < 50 ms.
 */
import {
  optimalPartFractions,
  predictedAllReduceSeconds,
  uniformPartFractions,
  type MemberCapacity,
} from "../packages/swarm/src/averaging/load-balancing.ts";

const GBIT = 125e6; // bytes per second in 1 Gb/s
const RESNET50_BYTES = 25.6e6 * 4; // float32 gradient
const solves = Number(process.argv[2] ?? 25);

function peers(prefix: string, count: number, gbits: number): MemberCapacity[] {
  return Array.from({ length: count }, (_, i) => ({
    peerId: `${prefix}${String(i).padStart(2, "0")}`,
    uploadBytesPerSecond: gbits * GBIT,
    downloadBytesPerSecond: gbits * GBIT,
    canReduce: true,
    sends: true,
  }));
}

const a = peers("a", 8, 1);
const b = peers("b", 16, 0.2);
// Table 1: measured seconds for all-reduce (AR) and DeDLOC's adaptive averaging (Ours).
const setups = [
  { name: "A: 8x1Gb/s", members: a, paperAr: 1.19, paperOurs: 1.2 },
  { name: "B: 16x0.2Gb/s", members: b, paperAr: 5.3, paperOurs: 5.3 },
  { name: "C: A + B", members: [...a, ...b], paperAr: 5.69, paperOurs: 2.96 },
  { name: "D: B + 1x2.5Gb/s", members: [...b, ...peers("d", 1, 2.5)], paperAr: 5.3, paperOurs: 3.18 },
];

function minAndMedian(values: number[]): string {
  const sorted = [...values].sort((x, y) => x - y);
  return `${(sorted[0] ?? NaN).toFixed(2)} / ${(sorted[Math.floor(sorted.length / 2)] ?? NaN).toFixed(2)}`;
}

const loadStart = performance.now();
await optimalPartFractions(a);
const firstCallMs = performance.now() - loadStart;
for (const setup of setups) for (let i = 0; i < 5; i++) await optimalPartFractions(setup.members); // warm-up

const header = [
  "set-up",
  "uniform s",
  "optimal s",
  "speed-up",
  "paper AR s",
  "paper ours s",
  "paper speed-up",
  "LP ms min / median",
];
const rows: string[][] = [];
for (const setup of setups) {
  const times: number[] = [];
  let fractions: number[] = [];
  for (let i = 0; i < solves; i++) {
    const start = performance.now();
    fractions = await optimalPartFractions(setup.members);
    times.push(performance.now() - start);
  }
  const uniform = predictedAllReduceSeconds(
    setup.members,
    uniformPartFractions(setup.members),
    RESNET50_BYTES,
  );
  const optimal = predictedAllReduceSeconds(setup.members, fractions, RESNET50_BYTES);
  rows.push([
    setup.name,
    uniform.toFixed(3),
    optimal.toFixed(3),
    `${(uniform / optimal).toFixed(3)}x`,
    setup.paperAr.toFixed(2),
    setup.paperOurs.toFixed(2),
    `${(setup.paperAr / setup.paperOurs).toFixed(2)}x`,
    minAndMedian(times),
  ]);
}

const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
const line = (cells: string[]): string => cells.map((c, i) => c.padStart(widths[i] ?? 0)).join("  ");
console.log(`ResNet-50 gradient: ${RESNET50_BYTES / 1e6} MB, ${solves} LP solves per set-up`);
console.log(line(header));
for (const row of rows) console.log(line(row));
console.log(`first call, including loading the HiGHS Wasm module: ${firstCallMs.toFixed(1)} ms`);
