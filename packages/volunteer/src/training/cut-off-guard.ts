import { REVOKED_GRANT_REASON } from "@barnraise/protocol";
import type { Refusal } from "@barnraise/swarm";

/**
 * One run, one model, seen from a volunteer's peer (DESIGN §9): a peer that cannot join the others
 * while they train must not go on training a model of its own that nobody will use, and must say
 * why. The guard looks at how long the peer has stepped alone and at what tells it that others
 * train without it:
 *
 * - members refused its pass lately (a revoked token, a ban, a key the swarm does not trust): the
 *   swarm exists and will not take it;
 * - the platform lists aux peers for the run, the platform's public view has trainers alive, and
 *   this peer reaches no aux peer: the swarm trains elsewhere.
 *
 * After `cutOffAfterMs` of stepping alone with such evidence all along, the peer is cut off: the caller holds
 * training (and drops the solo steps, so it rejoins at the swarm's state instead of offering its
 * own), shows the reason, and keeps looking for the swarm. The hold ends as soon as the evidence is
 * gone (no refusal in the last `clearAfterMs` and a member to train with, or an aux peer reached).
 * A volunteer alone in a run with nobody else training is never cut off: its steps are the run's.
 *
 * Pure: the evidence comes in through `CutOffEvidence`, the time through `now`.
 */

export interface CutOffEvidence {
  /** Members that refused this node's pass lately, newest first. */
  refusals(): readonly Refusal[];
  /** Whether this node has a member it could train with now (another trainer or an aux peer). */
  hasMembers(): boolean;
  /** Whether an aux peer is among this node's members. */
  auxConnected(): boolean;
  /** Whether the platform listed aux peers for the run at the last join or rediscovery. */
  auxListed(): boolean;
  /** Trainers alive in the run as the platform last said (its public view); undefined when unknown. */
  platformAlivePeers(): number | undefined;
}

export interface CutOffGuardOptions {
  readonly evidence: CutOffEvidence;
  /** Steps in a row this peer applied with no other trainer's samples (the optimizer's `soloSteps`). */
  readonly soloSteps: () => number;
  /** Stepping alone this long, with evidence that others train, cuts the peer off; default 2 min. */
  readonly cutOffAfterMs?: number;
  /** A refusal older than this no longer holds the peer; default 30 s. */
  readonly clearAfterMs?: number;
  readonly now?: () => number;
}

export type CutOffVerdict =
  /** `refused`: members refuse this node's pass, why, and what to do (for the status line). */
  | { readonly cutOff: false; readonly refused?: string }
  | { readonly cutOff: true; readonly reason: string; readonly advice: string };

export const DEFAULT_CUT_OFF_AFTER_MS = 2 * 60_000;

export class CutOffGuard {
  readonly #options: CutOffGuardOptions;
  readonly #now: () => number;
  /** When the current run of solo steps began; undefined while the peer shares its steps. */
  #soloSince: number | undefined;
  /** Since when something has shown that others train without this peer; undefined while nothing does. */
  #evidenceSince: number | undefined;
  #held = false;

  constructor(options: CutOffGuardOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** Whether the peer is held now. */
  get held(): boolean {
    return this.#held;
  }

  /**
   * Looks again (call it every few seconds and after each step). While not cut off, `refused`
   * says, for the status line, that members refuse this node's pass and why.
   */
  check(): CutOffVerdict {
    const now = this.#now();
    const solo = this.#options.soloSteps() > 0;
    if (!solo && !this.#held) this.#soloSince = undefined;
    else this.#soloSince ??= now;
    const evidence = this.#evidence(now);
    if (evidence === undefined) this.#evidenceSince = undefined;
    else this.#evidenceSince ??= now;
    if (this.#held) {
      if (evidence === undefined) {
        this.#held = false;
        this.#soloSince = undefined;
        return { cutOff: false };
      }
      return { cutOff: true, reason: evidence.reason, advice: evidence.advice };
    }
    if (evidence === undefined) return { cutOff: false };
    // Alone, and shown that others train without it, both for the whole time.
    const since = Math.max(this.#soloSince ?? Infinity, this.#evidenceSince ?? Infinity);
    if (now - since >= (this.#options.cutOffAfterMs ?? DEFAULT_CUT_OFF_AFTER_MS)) {
      this.#held = true;
      return { cutOff: true, reason: evidence.reason, advice: evidence.advice };
    }
    return evidence.refused === undefined
      ? { cutOff: false }
      : { cutOff: false, refused: `${evidence.refused} — ${evidence.advice}` };
  }

  /** Why others train without this peer, or undefined when nothing says so. */
  #evidence(now: number): { reason: string; advice: string; refused?: string } | undefined {
    const { evidence } = this.#options;
    const refusal = evidence
      .refusals()
      .find((candidate) => now - candidate.at <= (this.#options.clearAfterMs ?? 30_000));
    // A refusal stands until the peer has a member again: one member refused, another took it.
    if (refusal !== undefined && !evidence.hasMembers()) {
      const refused = `refused by the swarm: ${refusalWhy(refusal)}`;
      return { reason: refused, advice: refusalAdvice(refusal), refused };
    }
    const alive = evidence.platformAlivePeers();
    if (evidence.auxListed() && !evidence.auxConnected() && alive !== undefined && alive > 0) {
      return {
        reason: `the swarm trains (${alive} peer${alive === 1 ? "" : "s"} alive) but this peer reaches none of its aux peers`,
        advice:
          "check that this machine can reach the aux peer's address (a firewall or proxy in the way); it keeps trying",
      };
    }
    return undefined;
  }
}

/**
 * Why the swarm refused the node's pass, in this program's words: the refusing peer's own text is
 * another machine's (a hostile member could write anything there), so it only picks among them.
 */
export function refusalWhy(refusal: Pick<Refusal, "code" | "reason">): string {
  switch (refusal.code) {
    case "PASS_REVOKED":
      if (refusal.reason === REVOKED_GRANT_REASON) return REVOKED_GRANT_REASON;
      return BANNED.test(refusal.reason)
        ? "this node's user is banned or no longer on the allowlist"
        : "its pass was revoked";
    case "PASS_EXPIRED":
      return "its pass expired";
    case "PASS_NOT_YET_VALID":
    case "REQUEST_CLOCK_SKEW":
      return "this computer's clock is off";
    case "PASS_BAD_SIGNATURE":
      return "its pass is signed by a key the swarm does not trust";
    case "PASS_KEY_ROTATED":
      return "its pass is of the experiment's replaced key";
    default:
      return "its pass was refused";
  }
}

/** How a member says that the pass's user was banned (AccessPassVerifier#revocationOf). */
const BANNED = /^[A-Za-z0-9_.-]{1,64} was banned or removed from this experiment$/;

/** What the volunteer can do about a refusal of the node's pass, by its code. */
export function refusalAdvice(refusal: Pick<Refusal, "code" | "reason">): string {
  if (refusal.code === "PASS_REVOKED") {
    return BANNED.test(refusal.reason)
      ? "banned: this node's user may not take part in the run"
      : "create a new token on the experiment's page and restart the node with it";
  }
  if (refusal.code === "PASS_NOT_YET_VALID" || refusal.code === "REQUEST_CLOCK_SKEW") {
    return "check that this computer's clock is right";
  }
  if (refusal.code === "PASS_BAD_SIGNATURE") {
    return "the organizer may have changed the experiment's key: restart the node";
  }
  return "restart the node; if it is refused again, create a new token and restart it with that";
}
