import type { PeerProgressRecord } from "@barnraise/swarm";

/**
 * One run, one model (DESIGN §9): the aux watches the trainers' state fingerprints and tells when
 * the swarm has split into groups that train different models.
 *
 * - `diverged`: two trainers hold different digests for the same step. Every member of a group
 *   applies the same averaged update to the same bits, so equal steps must mean equal digests. Each
 *   pair of fresh trainers is compared at the latest step both have published a digest for (a trainer
 *   that loaded the swarm's state agrees again at once). Checked only while the swarm averages in
 *   one group (`exact`): Moshpit's grid rounds average the same numbers in different orders, so
 *   their bits may differ in the last place without any split.
 * - `alone`: a trainer has applied `aloneSteps` steps in a row, for `aloneForMs` at least, with no
 *   other trainer's samples in them while another trainer trains too (its epoch moved meanwhile):
 *   it cannot reach them, or they refuse it. Its steps need not meet anyone else's, so digests
 *   alone would not show it. The time bound keeps a trainer that just left (its record stays fresh
 *   a few seconds) from making the one that stays look alone.
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

export interface SplitWatchOptions {
  /** A record received longer ago than this is stale, and its trainer left out. */
  readonly ttlMs: number;
  /** Whether the swarm averages everyone in one group now (digests must then agree bit for bit). */
  readonly exact: () => boolean;
  /** Solo steps in a row that make a trainer "alone"; default 10. */
  readonly aloneSteps?: number;
  /** …taken over this long at least; default 30 s. */
  readonly aloneForMs?: number;
  /** Digests kept per trainer; default 64 steps. */
  readonly historySteps?: number;
  /** Trainers compared pairwise at most (the first by PeerId); default 64. */
  readonly maxCompared?: number;
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
  /** When its epoch last moved. */
  movedAt: number;
  receivedAt: number;
  /** Digest per step, in ascending step order (Map insertion order is kept ascending). */
  readonly digests: Map<number, string>;
}

export class SplitWatch {
  readonly #options: SplitWatchOptions;
  readonly #now: () => number;
  readonly #trainers = new Map<string, TrainerState>();
  #generation = 0;
  #since: number | undefined;
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
        movedAt: update.receivedAt,
        receivedAt: 0,
        digests: new Map(),
      };
      this.#trainers.set(update.peerId, trainer);
    }
    if (record.epoch !== trainer.epoch) trainer.movedAt = update.receivedAt;
    trainer.epoch = record.epoch;
    trainer.soloSteps = record.soloSteps ?? 0;
    if (trainer.soloSteps === 0) trainer.soloSince = undefined;
    else trainer.soloSince ??= update.receivedAt;
    trainer.receivedAt = update.receivedAt;
    const hash = record.stateHash;
    if (hash === undefined) return;
    // A state loaded from behind (a rollback, a resync) replaces the steps after it.
    for (const step of trainer.digests.keys()) if (step >= hash.epoch) trainer.digests.delete(step);
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
  }

  /** The split as of now, or null while the trainers train one model. */
  current(): SplitReport | null {
    const now = this.#now();
    const fresh = this.#fresh(now);
    const found = (this.#options.exact() ? diverged(fresh) : undefined) ?? this.#alone(fresh, now);
    if (found === undefined) {
      if (now - this.#lastSeenAt > (this.#options.clearAfterMs ?? 10_000)) this.#since = undefined;
      return null;
    }
    this.#lastSeenAt = now;
    this.#since ??= now;
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
      // Others that trained (their epoch moved) while this one stepped alone.
      const others = fresh.filter(([other, state]) => other !== peer && state.movedAt > soloSince);
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
      { digest: null, peers: [...others] },
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
