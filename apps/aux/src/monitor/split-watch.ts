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
 * - `alone`: a trainer has applied `aloneSteps` steps in a row with no other trainer's samples in
 *   them while others train (it cannot reach them, or they refuse it). Its steps need not meet
 *   anyone else's, so digests alone would not show it.
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

export interface SplitWatchOptions {
  /** A record received longer ago than this is stale, and its trainer left out. */
  readonly ttlMs: number;
  /** Whether the swarm averages everyone in one group now (digests must then agree bit for bit). */
  readonly exact: () => boolean;
  /** Solo steps in a row that make a trainer "alone"; default 10. */
  readonly aloneSteps?: number;
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
      trainer = { generation, epoch: 0, soloSteps: 0, receivedAt: 0, digests: new Map() };
      this.#trainers.set(update.peerId, trainer);
    }
    trainer.epoch = record.epoch;
    trainer.soloSteps = record.soloSteps ?? 0;
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
    const found = (this.#options.exact() ? diverged(fresh) : undefined) ?? this.#alone(fresh);
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

  #alone(fresh: ReadonlyArray<[string, TrainerState]>): Omit<SplitReport, "since"> | undefined {
    if (fresh.length < 2) return undefined;
    const limit = this.#options.aloneSteps ?? 10;
    const lone = fresh.find(([, trainer]) => trainer.soloSteps >= limit);
    if (lone === undefined) return undefined;
    const [peer, trainer] = lone;
    const others = fresh.filter(([other]) => other !== peer).map(([other]) => other);
    return {
      kind: "alone",
      step: trainer.epoch,
      groups: [
        { digest: null, peers: others },
        { digest: null, peers: [peer] },
      ],
      summary:
        `trainer ${shortPeer(peer)} has taken ${trainer.soloSteps} steps in a row with no other trainer ` +
        `while ${others.length} other${others.length === 1 ? "" : "s"} train: it trains a model of its own`,
    };
  }
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
  const groups = [...sides]
    .map(([digest, peers]) => ({ digest, peers }))
    .sort((a, b) => b.peers.length - a.peers.length || (a.digest < b.digest ? -1 : 1));
  return {
    kind: "diverged",
    step,
    groups,
    summary:
      `${groups.length} different models at step ${step}: ` +
      groups
        .map(
          (group) =>
            `${group.peers.length} trainer${group.peers.length === 1 ? "" : "s"} with ${group.digest}`,
        )
        .join(", "),
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

function shortPeer(peer: string): string {
  return peer.length <= 16 ? peer : `${peer.slice(0, 8)}…${peer.slice(-6)}`;
}
