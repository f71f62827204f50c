import highsExport from "highs";
import { SwarmError, SwarmErrorCode } from "../errors.ts";

/**
 * What one group member can do in a butterfly all-reduce: its measured link speeds, whether it
 * accepts connections (client-mode peers cannot reduce a part) and whether it contributes a vector
 * (aux peers only help reduce: they send nothing and take no result).
 */
export interface MemberCapacity {
  peerId: string;
  uploadBytesPerSecond: number;
  downloadBytesPerSecond: number;
  canReduce: boolean;
  sends: boolean;
}

// Fractions are multiples of 2^-40: every partial sum is then exact, so they add up to exactly 1 in
// any order, and the grid (≈ 1e-12) is far below anything a part size can resolve.
const FRACTION_GRID = 2 ** 40;
// Shares below this are solver noise and become 0 (a member that is the bottleneck with no part
// may get up to OPTIMUM_SLACK of one in the second solve).
const NEGLIGIBLE_FRACTION = 1e-6;
// The second solve may take this much (relative) more time than the first one's optimum.
const OPTIMUM_SLACK = 1e-12;
// Tighter than HiGHS's default 1e-7, so fractions come out exact to about 1e-12.
const SOLVE_OPTIONS = {
  output_flag: false,
  solver: "simplex",
  random_seed: 0,
  primal_feasibility_tolerance: 1e-10,
  dual_feasibility_tolerance: 1e-10,
} as const;

type HighsLoader = (typeof highsExport)["default"];
type Highs = Awaited<ReturnType<HighsLoader>>;

/**
 * The package's typings are CommonJS-shaped (the loader under `.default`), while Node imports its
 * ES build, whose default export is the loader itself; accept both shapes.
 */
function highsLoader(): HighsLoader {
  const exported: unknown = highsExport;
  if (typeof exported === "function") return exported as HighsLoader;
  return highsExport.default;
}

let highsPromise: Promise<Highs> | undefined;
/** Where the solver's `.wasm` is fetched from, in a runtime that does not read it beside the code. */
let wasmBase: string | undefined;

/**
 * Tells the solver where its `highs.wasm` is served (a URL ending in "/"): a browser fetches it from
 * there, as TF.js's wasm backend fetches its binaries. Node.js reads it from the installed package.
 */
export function setSolverWasmBase(base: string): void {
  wasmBase = base;
  highsPromise = undefined;
}

/** Loads the HiGHS Wasm module once per process; a failed load is retried by the next call. */
function loadHighs(): Promise<Highs> {
  const base = wasmBase;
  const options = base === undefined ? {} : { locateFile: (file: string) => new URL(file, base).href };
  highsPromise ??= highsLoader()(options).catch((error: unknown) => {
    highsPromise = undefined;
    throw new SwarmError(SwarmErrorCode.LOAD_BALANCING_FAILED, "could not load the HiGHS solver", {
      cause: error,
    });
  });
  return highsPromise;
}

function fail(message: string): SwarmError {
  return new SwarmError(SwarmErrorCode.LOAD_BALANCING_FAILED, message);
}

function checkBandwidths(members: readonly MemberCapacity[]): void {
  for (const m of members) {
    for (const [what, value] of [
      ["upload", m.uploadBytesPerSecond],
      ["download", m.downloadBytesPerSecond],
    ] as const) {
      if (!Number.isFinite(value) || value <= 0) {
        throw fail(`${what} bandwidth of ${m.peerId} must be a finite positive number, got ${value}`);
      }
    }
  }
}

/**
 * Bytes a member moves on each link per vector byte, as `base + slope · w` where w is its part:
 * it sends away (1 − w) of its own vector and gets those averages back, and for its part it
 * receives one copy from every other sender and returns the average to every other receiver.
 */
function linkLoad(
  member: MemberCapacity,
  senders: number,
): { base: number; slope: number; reduceSlope: number } {
  const own = member.sends ? 1 : 0;
  const others = senders - own;
  return { base: own, slope: others - own, reduceSlope: others };
}

/** Time of a member with part `w`: its slower link decides (loads are per vector byte). */
function memberSeconds(member: MemberCapacity, senders: number, w: number, bytes: number): number {
  const { base, slope } = linkLoad(member, senders);
  const load = (base + slope * w) * bytes;
  return Math.max(load / member.uploadBytesPerSecond, load / member.downloadBytesPerSecond);
}

function term(coefficient: number, name: string): string {
  return `${coefficient < 0 ? "-" : "+"} ${Math.abs(coefficient)} ${name}`;
}

/**
 * The two linear programs, in CPLEX LP format, over members in canonical order (bandwidths
 * divided by the largest one, so every coefficient is at most the member count).
 * Stage 1 minimizes T, the time of the slowest member. Stage 2 keeps T within the optimum and
 * minimizes L, the longest time any member spends on reduction traffic: many fraction vectors
 * reach the optimum T when some senders are slow anyway (they bottleneck T with w = 0), and the
 * simplex method would hand out one corner of that set, loading a few fast peers fully and
 * leaving others idle. Stage 2 has one solution: parts in proportion to bandwidth, each capped
 * so that no member exceeds T.
 */
function buildLp(members: readonly MemberCapacity[], maxT: number | undefined): string {
  const senders = members.filter((m) => m.sends).length;
  const scale = Math.max(...members.flatMap((m) => [m.uploadBytesPerSecond, m.downloadBytesPerSecond]));
  const rows: string[] = [];
  const bounds: string[] = [];
  const reducers: string[] = [];
  members.forEach((member, k) => {
    const w = `w${k}`;
    const { base, slope, reduceSlope } = linkLoad(member, senders);
    const links = [
      ["up", member.uploadBytesPerSecond / scale],
      ["down", member.downloadBytesPerSecond / scale],
    ] as const;
    for (const [link, speed] of links) {
      // base + slope·w ≤ T·speed
      const wTerm = member.canReduce && slope !== 0 ? `${term(slope, w)} ` : "";
      rows.push(` t_${link}${k}: ${wTerm}${term(-speed, "T")} <= ${-base}`);
      // the part of that traffic spent on reducing: reduceSlope·w ≤ L·speed
      if (maxT !== undefined && member.canReduce) {
        const reduceTerm = reduceSlope !== 0 ? `${term(reduceSlope, w)} ` : "";
        rows.push(` r_${link}${k}: ${reduceTerm}${term(-speed, "L")} <= 0`);
      }
    }
    if (member.canReduce) {
      reducers.push(w);
      bounds.push(` 0 <= ${w} <= 1`);
    }
  });
  rows.push(` parts: ${reducers.join(" + ")} = 1`);
  bounds.push(maxT === undefined ? " T >= 0" : ` 0 <= T <= ${maxT}`);
  const objective = maxT === undefined ? "T" : "L";
  return ["Minimize", ` time: ${objective}`, "Subject To", ...rows, "Bounds", ...bounds, "End"].join("\n");
}

type Solution = ReturnType<Highs["solve"]>;

function solve(highs: Highs, lp: string, what: string): Solution {
  let solution: Solution;
  try {
    solution = highs.solve(lp, SOLVE_OPTIONS);
  } catch (error) {
    throw new SwarmError(SwarmErrorCode.LOAD_BALANCING_FAILED, `HiGHS rejected the ${what} LP`, {
      cause: error,
    });
  }
  if (solution.Status !== "Optimal") {
    throw fail(`the ${what} LP ended with status "${solution.Status}", not "Optimal"`);
  }
  return solution;
}

function primal(solution: Solution, column: string): number {
  const value = solution.Status === "Optimal" ? solution.Columns[column]?.Primal : undefined;
  if (value === undefined || !Number.isFinite(value))
    throw fail(`the LP solution has no value for ${column}`);
  return value;
}

/** Members' indices sorted by peer id, so every member builds the same LP from the same set. */
function canonicalOrder(members: readonly MemberCapacity[]): number[] {
  const id = (i: number): string => members[i]?.peerId ?? "";
  const order = members.map((_, i) => i).sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0));
  for (let k = 1; k < order.length; k++) {
    if (id(order[k] ?? 0) === id(order[k - 1] ?? 0)) throw fail(`peer ${id(order[k] ?? 0)} is listed twice`);
  }
  return order;
}

/** Cleans solver output (negatives and noise → 0) and snaps it to the grid, summing to exactly 1. */
function toExactFractions(raw: readonly number[]): number[] {
  const cleaned = raw.map((v) => (v > 0 ? v : 0));
  const total = cleaned.reduce((sum, v) => sum + v, 0);
  if (!(total > 0)) throw fail("the LP solution gives no part to any member");
  const units = cleaned.map((v) =>
    v / total < NEGLIGIBLE_FRACTION ? 0 : Math.round((v / total) * FRACTION_GRID),
  );
  let largest = 0;
  units.forEach((u, k) => {
    if (u > (units[largest] ?? 0)) largest = k;
  });
  const residual = FRACTION_GRID - units.reduce((sum, u) => sum + u, 0);
  units[largest] = (units[largest] ?? 0) + residual;
  return units.map((u) => u / FRACTION_GRID);
}

// A swarm with steady links forms the same groups round after round: the latest solutions, by the
// canonical member list (the result is a pure function of it), oldest first.
const SOLVED_CACHE_SIZE = 32;
const solvedFractions = new Map<string, readonly number[]>();

/**
 * Optimal butterfly all-reduce part sizes for `members` (DeDLOC §3.2 and Appendix B; Moshpit
 * eq. 5 with separate links and roles), as fractions of the vector in member order. Clients get
 * 0. The result depends only on the set of members (it is solved in peer-id order), not on the
 * order given, and is bit-identical wherever the same HiGHS build runs, so all group members can
 * compute it on their own and agree.
 */
export async function optimalPartFractions(members: readonly MemberCapacity[]): Promise<number[]> {
  checkBandwidths(members);
  if (!members.some((m) => m.canReduce)) throw fail("no member of the group can reduce a part");
  if (!members.some((m) => m.sends)) throw fail("no member of the group sends a vector");
  const order = canonicalOrder(members);
  const sorted = order.map((i) => members[i]).filter((m) => m !== undefined);
  const key = JSON.stringify(sorted);
  let fractions = solvedFractions.get(key);
  if (fractions === undefined) {
    const highs = await loadHighs();
    const fastest = primal(solve(highs, buildLp(sorted, undefined), "minimum-time"), "T");
    const balanced = solve(highs, buildLp(sorted, fastest * (1 + OPTIMUM_SLACK)), "balanced-parts");
    fractions = toExactFractions(sorted.map((m, k) => (m.canReduce ? primal(balanced, `w${k}`) : 0)));
    solvedFractions.set(key, fractions);
    for (const oldest of solvedFractions.keys()) {
      if (solvedFractions.size <= SOLVED_CACHE_SIZE) break;
      solvedFractions.delete(oldest);
    }
  }
  const result = new Array<number>(members.length).fill(0);
  order.forEach((memberIndex, k) => {
    result[memberIndex] = fractions[k] ?? 0;
  });
  return result;
}

/** Equal parts for every member that can reduce: the baseline that load balancing improves on. */
export function uniformPartFractions(members: readonly MemberCapacity[]): number[] {
  const reducers = members.filter((m) => m.canReduce).length;
  if (reducers === 0) throw fail("no member of the group can reduce a part");
  return members.map((m) => (m.canReduce ? 1 / reducers : 0));
}

/**
 * Splits `length` vector elements into whole parts in proportion to `fractions` (largest
 * remainder, ties to the lower index), so every member derives the same part boundaries.
 */
export function partElementCounts(length: number, fractions: readonly number[]): number[] {
  if (!Number.isSafeInteger(length) || length < 0)
    throw fail(`vector length must be a whole number ≥ 0, got ${length}`);
  if (fractions.some((f) => !Number.isFinite(f) || f < 0))
    throw fail("part fractions must be finite and ≥ 0");
  const total = fractions.reduce((sum, f) => sum + f, 0);
  if (!(total > 0)) throw fail("part fractions must have a positive sum");
  const quotas = fractions.map((f) => (length * f) / total);
  const counts = quotas.map((q) => Math.floor(q));
  const left = length - counts.reduce((sum, c) => sum + c, 0);
  const candidates = quotas
    .map((q, k) => ({ k, remainder: q - Math.floor(q) }))
    .filter(({ k }) => (fractions[k] ?? 0) > 0)
    .sort((a, b) => b.remainder - a.remainder || a.k - b.k);
  for (let i = 0; i < left; i++) {
    const k = candidates[i % candidates.length]?.k ?? 0;
    counts[k] = (counts[k] ?? 0) + 1;
  }
  return counts;
}

/**
 * Modelled seconds for one butterfly all-reduce of `vectorBytes` with these parts: the slowest
 * member's time, each member limited by the slower of its two links (no latency, full overlap).
 */
export function predictedAllReduceSeconds(
  members: readonly MemberCapacity[],
  fractions: readonly number[],
  vectorBytes: number,
): number {
  if (fractions.length !== members.length) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `got ${fractions.length} part fractions for ${members.length} members`,
    );
  }
  if (!Number.isFinite(vectorBytes) || vectorBytes < 0)
    throw fail(`vector size must be ≥ 0 bytes, got ${vectorBytes}`);
  checkBandwidths(members);
  const senders = members.filter((m) => m.sends).length;
  return members.reduce(
    (slowest, m, i) => Math.max(slowest, memberSeconds(m, senders, fractions[i] ?? 0, vectorBytes)),
    0,
  );
}
