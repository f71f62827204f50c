/**
 * When each member of one round was last heard from: any frame it sent on any of the round's
 * streams, a chunk for this member's part or a result of its own part.
 *
 * The deadlines that drop a member as frozen or cut off (the reducer's sender deadline, a sender's
 * result deadline) count from this, not from the one stream that waits. A slow link is one queue:
 * a reducer's results to a member wait behind the chunks it sends that member as a sender, and a
 * sender's chunks behind its results. So a reducer whose result is late while its chunks keep
 * arriving is slow, not gone. Measured in `slow-link-netns.test.ts`: right after a member's link fell
 * to a tenth (2 Mbit/s) and before any round had measured it, its first result from a reducer took
 * over 7 s while that reducer's chunks came in all along, and the round failed (6 of 15 runs; 0
 * of 12 since). A member that sends nothing at all is still dropped after the deadline; a frozen
 * process whose kernel still drains what it had written is heard from until that is sent.
 */

import { stallAwareTimeout, type StallAwareTimeout } from "../time/stall-aware-timeout.ts";

export class PeerActivity {
  readonly #lastHeard = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** `peer` sent a frame just now. */
  heard(peer: string): void {
    this.#lastHeard.set(peer, this.#now());
  }

  /** Milliseconds since `peer` was last heard from in this round; Infinity when never. */
  silentFor(peer: string): number {
    const last = this.#lastHeard.get(peer);
    return last === undefined ? Infinity : this.#now() - last;
  }
}

/**
 * Calls `expire` once `ms` have passed (stall-aware) with nothing heard from `peer` for the last
 * `ms` of them: when the time runs out while `peer` was heard from meanwhile, it waits the rest of
 * `ms` from the last time it was. Without `activity`, a plain stall-aware timeout.
 */
export function silenceTimeout(
  activity: PeerActivity | undefined,
  peer: string,
  ms: number,
  expire: () => void,
): StallAwareTimeout {
  let timer: StallAwareTimeout | undefined;
  let cleared = false;
  const arm = (delayMs: number): void => {
    timer = stallAwareTimeout(() => {
      if (cleared) return;
      const silent = activity?.silentFor(peer) ?? Infinity;
      if (silent < ms) arm(ms - silent);
      else expire();
    }, delayMs);
  };
  arm(ms);
  return {
    clear: () => {
      cleared = true;
      timer?.clear();
    },
  };
}
