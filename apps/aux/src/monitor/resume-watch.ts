/** How long every live trainer must stay behind the last recorded step before it counts as a resume. */
export const RESUME_GRACE_MS = 5_000;
/** …or this long when it is plain that the swarm went back (see ResumeWatch). */
export const PLAIN_RESUME_GRACE_MS = 1_000;

/**
 * Tells when the swarm went back to an older state, and from which step. Returns that step once
 * from `check`, then starts watching afresh. Three kinds of evidence:
 * - a full restart: this aux loaded the platform's checkpoint at start (`startedFrom`), and the
 *   platform refused a later step as recorded already: the swarm is training those steps again;
 * - every trainer left and the ones that came loaded an older state: the swarm's highest step
 *   stays more than one step below the highest this aux saw, for PLAIN_RESUME_GRACE_MS;
 * - live trainers whose highest step stays below the last step the platform recorded, for
 *   RESUME_GRACE_MS (long enough that a straggler left alone for a moment is not taken for one).
 * A trainer at step 0 has just started and is about to load a state, so it is no evidence.
 *
 * The step the swarm went on from is the state the trainers loaded: the platform's checkpoint that
 * this aux loaded at start, else the state this aux held when the swarm fell behind (trainers with
 * no live donor load it from the aux), else the lowest step seen meanwhile. The platform starts a
 * new timeline only when it recorded steps past it.
 */
export class ResumeWatch {
  #since: number | undefined;
  #from: number | undefined;
  #lowest: number | undefined;
  #startedFrom: number | undefined;
  #redone = false;
  #highest: number | undefined;

  /** The state this aux loaded from the platform at start, before the swarm had posted anything. */
  startedFrom(step: number): void {
    this.#startedFrom = step;
  }

  /** The platform stored a step: the swarm is ahead of what it recorded. */
  stored(): void {
    this.#startedFrom = undefined;
  }

  /** The platform refused `step` as recorded already. */
  refused(step: number): void {
    if (this.#startedFrom !== undefined && step > this.#startedFrom) this.#redone = true;
  }

  check(
    now: number,
    alive: number,
    step: number,
    lastPosted: number | undefined,
    heldStep: number | undefined,
  ): number | undefined {
    if (this.#redone && this.#startedFrom !== undefined) {
      const from = this.#startedFrom;
      this.clear();
      return from;
    }
    if (alive === 0 || step === 0) {
      // Nobody trains (or only newcomers): keep the highest step seen, so a swarm that comes back
      // behind it shows.
      this.#since = undefined;
      return undefined;
    }
    const highest = this.#highest;
    this.#highest = Math.max(highest ?? step, step);
    const dropped = highest !== undefined && step < highest - 1;
    const behind = lastPosted !== undefined && step < lastPosted;
    if (!dropped && !behind) {
      this.#since = undefined;
      return undefined;
    }
    if (this.#since === undefined) {
      this.#since = now;
      this.#from = heldStep;
      this.#lowest = step;
    }
    this.#lowest = Math.min(this.#lowest ?? step, step);
    if (now - this.#since < (dropped ? PLAIN_RESUME_GRACE_MS : RESUME_GRACE_MS)) return undefined;
    const from = this.#from ?? this.#lowest;
    this.clear();
    return from;
  }

  /** Forgets everything seen (after a reported resume or a rollback). */
  clear(): void {
    this.#since = undefined;
    this.#from = undefined;
    this.#lowest = undefined;
    this.#startedFrom = undefined;
    this.#redone = false;
    this.#highest = undefined;
  }
}
