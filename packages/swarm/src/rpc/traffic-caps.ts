import { TokenBucket } from "limiter";
import { SwarmError, SwarmErrorCode } from "../errors.ts";

/**
 * The volunteer's caps on this peer's traffic (`--max-upload`, `--max-download`): every stream of
 * the signed rpc layer (all-reduce parts and results, state downloads, speed tests) takes its
 * frames' bytes from one bucket per direction, so the peer as a whole keeps to the cap whatever
 * it does at once. Progress records (gossip, a few hundred bytes a second) are not counted.
 */
export interface TrafficCaps {
  readonly upload?: RateCap;
  readonly download?: RateCap;
}

/** Bursts last at most this long at the cap, so that it holds over short windows too. */
const BURST_SECONDS = 0.05;
/** The smallest burst, so that small frames do not each wait for a timer. */
const MIN_BURST_BYTES = 4096;

/** A cap on the bytes per second one direction of this peer's traffic carries. */
export class RateCap {
  readonly bytesPerSecond: number;
  readonly #bucket: TokenBucket;
  readonly #burst: number;

  constructor(bytesPerSecond: number) {
    if (!Number.isFinite(bytesPerSecond) || bytesPerSecond <= 0) {
      throw new SwarmError(
        SwarmErrorCode.MALFORMED_MESSAGE,
        `a traffic cap must be positive, got ${bytesPerSecond}`,
      );
    }
    this.bytesPerSecond = bytesPerSecond;
    this.#burst = Math.max(MIN_BURST_BYTES, Math.round(bytesPerSecond * BURST_SECONDS));
    this.#bucket = new TokenBucket({
      bucketSize: this.#burst,
      tokensPerInterval: bytesPerSecond,
      interval: "second",
    });
  }

  /**
   * Resolves once `bytes` may pass at the cap (callers wait their turn in order). Rejects with
   * ABORTED when `signal` aborts; what was granted before stays spent.
   */
  async take(bytes: number, signal?: AbortSignal): Promise<void> {
    for (let left = bytes; left > 0; left -= this.#burst) {
      if (signal?.aborted === true)
        throw new SwarmError(SwarmErrorCode.ABORTED, "aborted while at the traffic cap");
      const granted = this.#bucket.removeTokens(Math.min(left, this.#burst));
      if (signal === undefined) await granted;
      else await untilGranted(granted, signal);
    }
  }
}

/** Waits for `granted`, or rejects with ABORTED when `signal` aborts first. */
function untilGranted(granted: Promise<unknown>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      reject(new SwarmError(SwarmErrorCode.ABORTED, "aborted while at the traffic cap"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    granted.then(
      () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}
