/** The least share of the time a volunteer may let the machine compute; below it a step would take ages. */
export const MIN_DUTY_CYCLE = 0.1;

/**
 * The volunteer's own hand on the machine while it trains (a tab's pause button, "pause when this
 * tab is hidden", its use limit): paused or not, and the share of the time it may compute. The
 * program changes it at any time; the run follows at the next minibatch (a round in flight
 * finishes, so the others never wait on a paused member).
 */
export class VolunteerControls {
  #paused: boolean;
  #dutyCycle: number;
  readonly #listeners = new Set<() => void>();

  constructor(initial: { readonly paused?: boolean; readonly dutyCycle?: number } = {}) {
    this.#paused = initial.paused ?? false;
    this.#dutyCycle = checkDutyCycle(initial.dutyCycle ?? 1);
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** The share of the time the machine may compute, in [MIN_DUTY_CYCLE, 1]. */
  get dutyCycle(): number {
    return this.#dutyCycle;
  }

  pause(): void {
    this.#set(true, this.#dutyCycle);
  }

  resume(): void {
    this.#set(false, this.#dutyCycle);
  }

  /** Throws RangeError outside [MIN_DUTY_CYCLE, 1]. */
  setDutyCycle(share: number): void {
    this.#set(this.#paused, checkDutyCycle(share));
  }

  /** Calls `listener` after every change; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  #set(paused: boolean, dutyCycle: number): void {
    if (paused === this.#paused && dutyCycle === this.#dutyCycle) return;
    this.#paused = paused;
    this.#dutyCycle = dutyCycle;
    for (const listener of this.#listeners) listener();
  }
}

function checkDutyCycle(share: number): number {
  if (!Number.isFinite(share) || share < MIN_DUTY_CYCLE || share > 1) {
    throw new RangeError(
      `the use limit must be between ${MIN_DUTY_CYCLE * 100} % and 100 %, not ${share * 100} %`,
    );
  }
  return share;
}
