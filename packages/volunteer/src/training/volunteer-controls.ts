import type { PauseReason } from "@barnraise/protocol";

/** The least share of the time a volunteer may let the machine compute; below it a step would take ages. */
export const MIN_DUTY_CYCLE = 0.1;

export { PAUSE_REASON_TEXT, type PauseReason } from "@barnraise/protocol";

/**
 * The volunteer's hand on the machine while it trains (a tab's pause button, "pause when this tab
 * is hidden", its use limit; the CLI peer's rules for idle time, battery, schedule, load and
 * temperature): the reasons it holds training now, if any, and the share of the time it may
 * compute. The program changes them at any time; the run follows at the next minibatch (a round in
 * flight finishes, so the others never wait on a paused member).
 */
export class VolunteerControls {
  readonly #holds = new Set<PauseReason>();
  #dutyCycle: number;
  readonly #listeners = new Set<() => void>();

  constructor(initial: { readonly paused?: boolean; readonly dutyCycle?: number } = {}) {
    if (initial.paused === true) this.#holds.add("volunteer");
    this.#dutyCycle = checkDutyCycle(initial.dutyCycle ?? 1);
  }

  /** Whether any reason holds training. */
  get paused(): boolean {
    return this.#holds.size > 0;
  }

  /** The reasons that hold training now, in the order they came. */
  get reasons(): readonly PauseReason[] {
    return [...this.#holds];
  }

  /** The share of the time the machine may compute, in [MIN_DUTY_CYCLE, 1]. */
  get dutyCycle(): number {
    return this.#dutyCycle;
  }

  /** The volunteer's own pause. */
  pause(): void {
    this.hold("volunteer");
  }

  resume(): void {
    this.release("volunteer");
  }

  /** Holds training for `reason` (again: no change). */
  hold(reason: PauseReason): void {
    if (this.#holds.has(reason)) return;
    this.#holds.add(reason);
    this.#changed();
  }

  /** Lifts `reason`'s hold; training goes on once no reason holds it. */
  release(reason: PauseReason): void {
    if (this.#holds.delete(reason)) this.#changed();
  }

  /** Holds or releases `reason`. */
  set(reason: PauseReason, held: boolean): void {
    if (held) this.hold(reason);
    else this.release(reason);
  }

  /** Throws RangeError outside [MIN_DUTY_CYCLE, 1]. */
  setDutyCycle(share: number): void {
    const checked = checkDutyCycle(share);
    if (checked === this.#dutyCycle) return;
    this.#dutyCycle = checked;
    this.#changed();
  }

  /** Calls `listener` after every change; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  #changed(): void {
    for (const listener of this.#listeners) listener();
  }
}

/** Parses a use limit as a volunteer writes it ("50%", "50", "0.5"); RangeError outside [10 %, 100 %]. */
export function parseDutyCycle(text: string): number {
  const trimmed = text.trim();
  const percent = /^(\d+(?:\.\d+)?)\s*%$/.exec(trimmed);
  const value = percent !== null ? Number(percent[1]) / 100 : Number(trimmed);
  const share = percent === null && value > 1 ? value / 100 : value;
  if (trimmed === "" || !Number.isFinite(share)) {
    throw new RangeError(`the use limit must be a percentage such as 50%, not ${JSON.stringify(text)}`);
  }
  return checkDutyCycle(share);
}

function checkDutyCycle(share: number): number {
  if (!Number.isFinite(share) || share < MIN_DUTY_CYCLE || share > 1) {
    throw new RangeError(
      `the use limit must be between ${MIN_DUTY_CYCLE * 100} % and 100 %, not ${share * 100} %`,
    );
  }
  return share;
}
