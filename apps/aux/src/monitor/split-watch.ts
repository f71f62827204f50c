import type { PeerProgressRecord } from "@barnraise/swarm";

/**
 * One run, one model (DESIGN §9): the aux watches the trainers' state fingerprints and tells when
 * the swarm has split into groups that train different models.
 *
 * - `diverged`: two trainers hold different digests for the same step. Every member of a group
 *   applies the same averaged update to the same bits, so equal steps must mean equal digests. Each
 *   pair of fresh trainers is compared at the latest step both have published a digest for (a trainer
 *   that loaded the swarm's state agrees again at once). Digests of Moshpit grid steps (`grid`) are
 *   never compared: a grid's groups average different members, so they hold different bits until
 *   the last round of the step is over, and each group ends the step with its own.
 * - `alone`: a trainer has applied `aloneSteps` steps in a row, for `aloneForMs` at least, with no
 *   other trainer's samples in them while another trainer trains too (it was seen taking two steps
 *   of one epoch each meanwhile): it cannot reach them, or they refuse it. Its steps need not meet
 *   anyone else's, so digests alone would not show it. A trainer that just left (its record stays
 *   fresh a few seconds) or one that just joined (it loads the state, a jump of many epochs) does
 *   not make a lone volunteer look alone.
 *
 * A split is reported once it has lasted `reportAfterMs` (a peer that stepped alone once takes the
 * swarm's state over at its next step, see CollaborativeOptimizer), and until it has been gone for
 * `clearAfterMs`.
 *
 * Pure state: the caller feeds `observe` and asks `current()`.
 */

export type SplitKind = "diverged" | "alone";

export interface SplitGroup {
  /** The digest this side holds at `step` (diverged), or null (alone: the lone trainer, the rest). */
  readonly digest: string | null;
  readonly peers: readonly string[];
}

export interface SplitReport {
  readonly kind: SplitKind;
  /** The step the sides disagree at (diverged), or the lone trainer's step (alone). */
  readonly step: number;
  /** Unix ms when this split was first seen; it stays while the split lasts. */
  readonly since: number;
  /** The sides, the largest first. */
  readonly groups: readonly SplitGroup[];
  /** One sentence for the dashboard and the alert. */
  readonly summary: string;
}

/**
 * What a report carries at most (the platform's limits): sides, trainers named per side, and sides
 * described in the summary (which stays far below 1,000 characters).
 */
const MAX_GROUPS = 16;
const MAX_GROUP_PEERS = 64;
const MAX_DESCRIBED_GROUPS = 8;
/** Single-step times kept per trainer. */
const STEP_TIMES_KEPT = 8;
/** An epoch jump of up to this many between two records counts as steps, not a state load. */
const MAX_STEPS_PER_RECORD = 4;

export interface SplitWatchOptions {
  /** A record received longer ago than this is stale, and its trainer left out. */
  readonly ttlMs: number;
  /** Solo steps in a row that make a trainer "alone"; default 10. */
  readonly aloneSteps?: number;
  /** …taken over this long at least; default 30 s. */
  readonly aloneForMs?: number;
  /** Digests kept per trainer; default 64 steps. */
  readonly historySteps?: number;
  /** Trainers compared pairwise at most (the first by PeerId); default 64. */
  readonly maxCompared?: number;
  /** A split is reported once it has lasted this long; default 15 s. */
  readonly reportAfterMs?: number;
  /** A split that has not been seen for this long is over; default 10 s. */
  readonly clearAfterMs?: number;
  readonly now?: () => number;
}

interface TrainerState {
  readonly generation: number;
  epoch: number;
  soloSteps: number;
  /** When this trainer's current run of solo steps was first seen; undefined while it shares. */
  soloSince: number | undefined;
  /** When it was seen taking single steps (its epoch grew by one), the latest last. */
  readonly stepTimes: number[];
  receivedAt: number;
  /** Digest per step, in ascending step order (Map insertion order is kept ascending). */
  readonly digests: Map<number, string>;
}

export class SplitWatch {
  readonly #options: SplitWatchOptions;
  readonly #now: () => number;
  readonly #trainers = new Map<string, TrainerState>();
  #generation = 0;
  /** Since when the split now seen has been seen; undefined while none is. */
  #since: number | undefined;
  #kind: SplitKind | undefined;
  /** Whether the split seen since `#since` was reported (it then outlives short gaps). */
  #reported = false;
  #lastSeenAt = -Infinity;

  constructor(options: SplitWatchOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** Takes in one record accepted from a peer; aux records and other generations are ignored. */
  observe(update: PeerProgressRecord): void {
    const { record } = update;
    if (record.mode === "aux") return;
    const generation = record.generation ?? 0;
    let trainer = this.#trainers.get(update.peerId);
    if (trainer === undefined || trainer.generation !== generation) {
      trainer = {
        generation,
        epoch: record.epoch,
        soloSteps: 0,
        soloSince: undefined,
        stepTimes: [],
        receivedAt: 0,
        digests: new Map(),
      };
      this.#trainers.set(update.peerId, trainer);
    }
    // A few epochs at a time are steps (records are sampled, a fast swarm steps between two);
    // a longer jump is a state loaded from others.
    const moved = record.epoch - trainer.epoch;
    if (moved >= 1 && moved <= MAX_STEPS_PER_RECORD) {
      trainer.stepTimes.push(update.receivedAt);
      if (trainer.stepTimes.length > STEP_TIMES_KEPT) trainer.stepTimes.shift();
    }
    trainer.epoch = record.epoch;
    const soloSteps = record.soloSteps ?? 0;
    // A run of solo steps that ended (fewer than before: a shared step came between, whether its
    // record reached this aux or not) starts its clock again.
    if (soloSteps === 0 || soloSteps < trainer.soloSteps) trainer.soloSince = undefined;
    if (soloSteps > 0) trainer.soloSince ??= update.receivedAt;
    trainer.soloSteps = soloSteps;
    trainer.receivedAt = update.receivedAt;
    const hash = record.stateHash;
    if (hash === undefined) return;
    // A state loaded from behind (a rollback, a resync) replaces the steps after it.
    for (const step of trainer.digests.keys()) if (step >= hash.epoch) trainer.digests.delete(step);
    // A grid step's digest is its group's, not the swarm's: nothing to compare.
    if (hash.grid === true) return;
    trainer.digests.set(hash.epoch, hash.digest);
    const keep = this.#options.historySteps ?? 64;
    while (trainer.digests.size > keep) {
      const oldest = trainer.digests.keys().next();
      if (oldest.done === true) break;
      trainer.digests.delete(oldest.value);
    }
  }

  /** Starts over for `generation` (after a rollback): earlier digests belong to another lineage. */
  reset(generation: number): void {
    this.#generation = generation;
    this.#trainers.clear();
    this.#since = undefined;
    this.#reported = false;
  }

  /**
   * The split as of now, or null while the trainers train one model (or it is too young to say).
   * A split is reported once it has been seen at every look for `reportAfterMs` (a split that
   * comes and goes is not one yet); once reported, its `since` holds across gaps shorter than
   * `clearAfterMs`, and so does a reported split that shows itself another way (two models where a
   * trainer was alone). Before it is reported, another kind of split starts its own clock.
   */
  current(): SplitReport | null {
    const now = this.#now();
    const fresh = this.#fresh(now);
    const found = diverged(fresh) ?? this.#alone(fresh, now);
    if (found === undefined) {
      if (!this.#reported || now - this.#lastSeenAt > (this.#options.clearAfterMs ?? 10_000)) {
        this.#since = undefined;
        this.#reported = false;
      }
      return null;
    }
    if (this.#since === undefined || (!this.#reported && found.kind !== this.#kind)) {
      this.#since = now;
      this.#reported = false;
    }
    this.#kind = found.kind;
    this.#lastSeenAt = now;
    if (now - this.#since < (this.#options.reportAfterMs ?? 15_000)) return null;
    this.#reported = true;
    return { ...found, since: this.#since };
  }

  #fresh(now: number): Array<[string, TrainerState]> {
    for (const [peer, trainer] of this.#trainers) {
      if (now - trainer.receivedAt > 10 * this.#options.ttlMs) this.#trainers.delete(peer);
    }
    return [...this.#trainers]
      .filter(([, trainer]) => trainer.generation === this.#generation)
      .filter(([, trainer]) => now - trainer.receivedAt <= this.#options.ttlMs)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .slice(0, this.#options.maxCompared ?? 64);
  }

  #alone(fresh: ReadonlyArray<[string, TrainerState]>, now: number): Omit<SplitReport, "since"> | undefined {
    if (fresh.length < 2) return undefined;
    const limit = this.#options.aloneSteps ?? 10;
    const forMs = this.#options.aloneForMs ?? 30_000;
    for (const [peer, trainer] of fresh) {
      if (trainer.soloSteps < limit || trainer.soloSince === undefined || now - trainer.soloSince < forMs)
        continue;
      const soloSince = trainer.soloSince;
      // Others seen training while this one stepped alone: two steps since it began, the latest
      // lately (one that stalled and only publishes does not count).
      const others = fresh.filter(([other, state]) => {
        const since = state.stepTimes.filter((at) => at > soloSince);
        return other !== peer && since.length >= 2 && now - (since.at(-1) ?? -Infinity) <= forMs;
      });
      if (others.length > 0)
        return aloneReport(
          peer,
          trainer,
          others.map(([other]) => other),
        );
    }
    return undefined;
  }
}

function aloneReport(
  peer: string,
  trainer: TrainerState,
  others: readonly string[],
): Omit<SplitReport, "since"> {
  return {
    kind: "alone",
    step: trainer.epoch,
    groups: [
      { digest: null, peers: others.slice(0, MAX_GROUP_PEERS) },
      { digest: null, peers: [peer] },
    ],
    summary:
      `trainer ${shortPeer(peer)} has taken ${trainer.soloSteps} steps in a row with no other trainer ` +
      `while ${others.length} other${others.length === 1 ? "" : "s"} train${others.length === 1 ? "s" : ""}: it trains a model of its own`,
  };
}

/** The latest step at which two fresh trainers hold different digests, and who holds which. */
function diverged(fresh: ReadonlyArray<[string, TrainerState]>): Omit<SplitReport, "since"> | undefined {
  let conflict: number | undefined;
  for (let i = 0; i < fresh.length; i++) {
    for (let j = i + 1; j < fresh.length; j++) {
      const a = fresh[i]?.[1].digests;
      const b = fresh[j]?.[1].digests;
      if (a === undefined || b === undefined) continue;
      const step = latestCommonStep(a, b);
      if (step === undefined || a.get(step) === b.get(step)) continue;
      if (conflict === undefined || step > conflict) conflict = step;
    }
  }
  if (conflict === undefined) return undefined;
  const step = conflict;
  const sides = new Map<string, string[]>();
  for (const [peer, trainer] of fresh) {
    const digest = trainer.digests.get(step);
    if (digest !== undefined) sides.set(digest, [...(sides.get(digest) ?? []), peer]);
  }
  const sorted = [...sides]
    .map(([digest, peers]) => ({ digest, peers }))
    .sort((a, b) => b.peers.length - a.peers.length || (a.digest < b.digest ? -1 : 1));
  const described = sorted
    .slice(0, MAX_DESCRIBED_GROUPS)
    .map(
      (group) => `${group.peers.length} trainer${group.peers.length === 1 ? "" : "s"} with ${group.digest}`,
    );
  if (sorted.length > MAX_DESCRIBED_GROUPS) described.push(`${sorted.length - MAX_DESCRIBED_GROUPS} more`);
  return {
    kind: "diverged",
    step,
    groups: sorted
      .slice(0, MAX_GROUPS)
      .map((group) => ({ ...group, peers: group.peers.slice(0, MAX_GROUP_PEERS) })),
    summary: `${sorted.length} different models at step ${step}: ${described.join(", ")}`,
  };
}

function latestCommonStep(
  a: ReadonlyMap<number, string>,
  b: ReadonlyMap<number, string>,
): number | undefined {
  let latest: number | undefined;
  const [small, large] = a.size <= b.size ? [a, b] : [b, a];
  for (const step of small.keys())
    if (large.has(step) && (latest === undefined || step > latest)) latest = step;
  return latest;
}

/** The end of a PeerId: Ed25519 ids all begin with "12D3KooW". */
function shortPeer(peer: string): string {
  return peer.length <= 16 ? peer : `…${peer.slice(-10)}`;
}
