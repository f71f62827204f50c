/** One sender's weight as this aux's reducer accepted it in a round (`Averager.observeContributions`). */
export interface WitnessedContribution {
  readonly epoch: number;
  readonly groupId: string;
  readonly peerId: string;
  readonly weight: number;
}

/**
 * What the aux can say about what a trainer put into the round of an epoch:
 * - `witnessed`: the aux reduced a part of the epoch's round and accepted `weight` samples of the
 *   peer's into it (`round` names the round, so that one round's weight is credited once);
 * - `absent`: the aux reduced a part of the epoch's round and the peer sent nothing into it: it was not
 *   in the swarm's round (an aux helps whole-swarm rounds only, so there is no other group to be in);
 * - `pending`: the aux has not reached the epoch yet and is helping rounds, so it will see it;
 * - `unwitnessed`: the aux did not take part in the epoch's round (it was starting, its round
 *   failed, the swarm averaged over a Moshpit grid, or it is not helping), or the round it saw began
 *   before the peer's session did, so the session's round of that epoch was another one (a swarm
 *   whose trainers all restarted averages again the epochs after its checkpoint), or the epoch is
 *   older than the rounds the aux keeps: nothing can be checked.
 */
export type WitnessStatus =
  | { readonly kind: "witnessed"; readonly weight: number; readonly round: string }
  | { readonly kind: "absent" | "pending" | "unwitnessed" };

/** Rounds kept: those of the most recent epochs up to the latest one the aux reduced a part of. */
const EPOCHS_KEPT = 256;
/**
 * How long after its latest observed round the aux still counts as helping: an epoch past the latest
 * it saw is `pending` until then, `unwitnessed` after (a grid, a helper that stopped).
 */
export const HELPING_WINDOW_MS = 60_000;

interface WitnessedRound {
  readonly groupId: string;
  /** When the aux saw the round's first contribution. */
  readonly firstAt: number;
  readonly weights: Map<string, number>;
}

/**
 * The weights the trainers put into the rounds this aux reduced a part of, as its reducer accepted
 * them (after the earned-weight check, before aggregation): the witness the leaderboard's credit is
 * held against (see `SessionCredit`). Every sender of a whole-swarm round sends the aux its share of
 * the aux's part, so each member's weight is seen before any member can finish the round. A later
 * round of an epoch (a retry) replaces the earlier one; a round that failed for the aux is dropped
 * (`failed`), and its epoch is then unwitnessed. When the swarm goes back to an older state (it
 * resumed from a checkpoint, or the organizer rolled it back), the epochs from there on are averaged
 * again, perhaps without this aux: `forgetFrom` drops the rounds it saw of them.
 */
export class RoundWitness {
  readonly #rounds = new Map<number, WitnessedRound>();
  readonly #now: () => number;
  /** The latest epoch whose round the aux saw (since the swarm last went back). */
  #highest = -1;
  #lastObservedAt = -Infinity;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  observe(contribution: WitnessedContribution): void {
    const { epoch, groupId, peerId, weight } = contribution;
    // A round far behind the latest: the swarm went back (this aux was not told yet).
    if (epoch <= this.#highest - EPOCHS_KEPT) this.forgetFrom(epoch);
    let round = this.#rounds.get(epoch);
    if (round?.groupId !== groupId) {
      round = { groupId, firstAt: this.#now(), weights: new Map() };
      this.#rounds.set(epoch, round);
    }
    // A sender's weight is the same on every chunk it sends.
    if (!round.weights.has(peerId)) round.weights.set(peerId, weight);
    this.#lastObservedAt = this.#now();
    if (epoch > this.#highest) {
      this.#highest = epoch;
      for (const kept of this.#rounds.keys()) if (kept <= epoch - EPOCHS_KEPT) this.#rounds.delete(kept);
    }
  }

  /** The aux's round of `epoch` failed: the trainers retry it, perhaps without this aux. */
  failed(epoch: number): void {
    this.#rounds.delete(epoch);
  }

  /** The swarm went back to the state of `epoch`: its rounds from there on are averaged again. */
  forgetFrom(epoch: number): void {
    for (const kept of this.#rounds.keys()) if (kept >= epoch) this.#rounds.delete(kept);
    // Its rounds from there on are yet to come.
    this.#highest = Math.min(this.#highest, epoch - 1);
  }

  /**
   * The samples that went into the round of `epoch` as this aux accepted them: Σ of its senders'
   * weights; undefined when the aux kept no round of that epoch (see `status`: unwitnessed).
   */
  samples(epoch: number): number | undefined {
    const round = this.#rounds.get(epoch);
    if (round === undefined) return undefined;
    let samples = 0;
    for (const weight of round.weights.values()) samples += weight;
    return samples;
  }

  /**
   * What the aux saw `peerId` put into the round of `epoch`; `since`: when the aux first heard of
   * the peer's session (a round that began before cannot hold that session's samples).
   */
  status(epoch: number, peerId: string, since = -Infinity): WitnessStatus {
    const round = this.#rounds.get(epoch);
    if (round !== undefined) {
      if (round.firstAt < since) return { kind: "unwitnessed" };
      const weight = round.weights.get(peerId);
      return weight === undefined
        ? { kind: "absent" }
        : { kind: "witnessed", weight, round: `${epoch}/${round.groupId}` };
    }
    const helping = this.#now() - this.#lastObservedAt <= HELPING_WINDOW_MS;
    return { kind: epoch > this.#highest && helping ? "pending" : "unwitnessed" };
  }
}
