import { moshpitDimensions } from "./group-size.ts";

/**
 * The Moshpit grid (Ryabinin et al., Algorithm 1) and its matchmaking keys. The n trainers of a
 * round, sorted by PeerId, fill a d-dimensional grid in that order, so that every peer that sees
 * the same trainers places everyone in the same cell without a word: rank i gets the mixed-radix
 * digits of i. In round r the peers that share every digit but the r-th form one group, so a
 * group's members all land in different groups next round, and after d rounds every peer holds
 * the exact weighted average of all (Theorem 1): each round averages group means weighted by
 * their groups' total samples.
 *
 * n is rarely a power of m. The grid's core is the largest full block that fits, m along each
 * dimension but the last and ⌊n / m^(d−1)⌋ along the last; the e-th of the few peers left over
 * (fewer than m^(d−1)) joins the e-th round-0 group (round robin), the group of its anchor (that
 * group's first core peer), and follows its anchor's groups in later rounds with weight 0: it
 * brings its samples once, and takes every later round's result without counting twice. So the
 * average stays exact on any n.
 */

function checkWhole(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${name} must be a whole number ≥ ${min}, got ${value}`);
  }
}

/**
 * The matchmaking key of the group for this epoch (training step) and round, e.g. "e12/r0/3.1".
 * With d = 1 the index is empty and every peer gets the same key: one group, plain all-reduce.
 * After a rollback (run `generation` > 0) the key starts with it, "g1/e12/r0/", so that the rounds
 * of the rolled-back timeline never meet the groups its epochs had before.
 */
export function groupKey(
  epoch: number,
  round: number,
  index: readonly number[],
  generation: number = 0,
): string {
  checkWhole("epoch", epoch, 0);
  checkWhole("round", round, 0);
  checkWhole("generation", generation, 0);
  for (const coordinate of index) checkWhole("grid coordinate", coordinate, 0);
  const key = `e${epoch}/r${round}/${index.join(".")}`;
  return generation === 0 ? key : `g${generation}/${key}`;
}

/** The parts of a group key; undefined for a key of another shape. */
export function parseGroupKey(
  key: string,
): { generation: number; epoch: number; round: number; cell: number[]; wholeSwarm: boolean } | undefined {
  const match = /^(?:g(\d+)\/)?e(\d+)\/r(\d+)\/([\d.]*)$/.exec(key);
  if (match === null) return undefined;
  return {
    generation: Number(match[1] ?? 0),
    epoch: Number(match[2]),
    round: Number(match[3]),
    cell: match[4] === "" || match[4] === undefined ? [] : match[4].split(".").map(Number),
    wholeSwarm: match[3] === "0" && match[4] === "",
  };
}

/** Where the peers of one round sit in the grid, and whom each group holds in each round. */
export interface GridPlan {
  /** Rounds (grid dimensions): 1 when one group holds everyone. */
  readonly dimensions: number;
  /** The grid's core: its extent along each dimension. */
  readonly radices: readonly number[];
  /** The peers placed, in rank order (sorted by PeerId). */
  readonly peers: readonly string[];
  /** The key coordinates of `peer`'s group in `round`; undefined for a peer not in the plan. */
  cellOf(peer: string, round: number): number[] | undefined;
  /** The peers of the group with `cell` coordinates in `round`, in rank order. */
  membersOf(round: number, cell: readonly number[]): string[];
  /**
   * Whether `peer` brings its samples in `round`: every peer in round 0, only the core's peers
   * after it (a peer left over takes the later rounds' results with weight 0).
   */
  contributesIn(peer: string, round: number): boolean;
}

/**
 * Places `peers` (distinct PeerIds; sorted here) in a grid of groups of about `groupSize`, with
 * `moshpitDimensions(n, groupSize)` rounds.
 */
export function planGrid(peers: readonly string[], groupSize: number): GridPlan {
  checkWhole("group size", groupSize, 1);
  const sorted = [...new Set(peers)].sort();
  const n = sorted.length;
  const dimensions = n <= 1 ? 1 : moshpitDimensions(n, groupSize);
  const radices = Array.from({ length: dimensions }, (_, j) =>
    j < dimensions - 1 ? groupSize : Math.max(1, Math.floor(n / groupSize ** (dimensions - 1))),
  );
  const core = radices.reduce((product, radix) => product * radix, 1);
  const firstGroups = core / (radices[0] ?? 1);
  const digitsOf = (coreRank: number): number[] => {
    const digits: number[] = [];
    let rest = coreRank;
    for (const radix of radices) {
      digits.push(rest % radix);
      rest = Math.floor(rest / radix);
    }
    return digits;
  };
  const rank = new Map(sorted.map((peer, i) => [peer, i]));
  /** The core rank whose groups a peer follows: itself, or a left-over peer's anchor. */
  const anchorOf = (i: number): number => (i < core ? i : ((i - core) % firstGroups) * (radices[0] ?? 1));
  const cellOfRank = (i: number, round: number): number[] => {
    const digits = digitsOf(anchorOf(i));
    digits.splice(round, 1);
    return digits;
  };
  return {
    dimensions,
    radices,
    peers: sorted,
    cellOf(peer, round) {
      const i = rank.get(peer);
      if (i === undefined || round < 0 || round >= dimensions) return undefined;
      return cellOfRank(i, round);
    },
    membersOf(round, cell) {
      const key = cell.join(".");
      return sorted.filter((_, i) => round < dimensions && cellOfRank(i, round).join(".") === key);
    },
    contributesIn(peer, round) {
      const i = rank.get(peer);
      return i !== undefined && (round === 0 || i < core);
    },
  };
}
