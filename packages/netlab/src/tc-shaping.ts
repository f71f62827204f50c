/**
 * Turns a link description (rate, one-way delay) into `tc` commands for one interface's egress.
 * Pure: it only builds argument lists, so the numbers can be unit-tested without root.
 *
 * Rate limiting uses a token bucket (tbf). Its burst must cover the time the kernel may take to
 * dequeue again after the bucket empties, or tokens are lost and the measured rate falls short; so
 * the burst scales with the rate. The queue holds `queueMs` worth of traffic at the rate (at least
 * 256 KiB): enough for TCP's start-up without drops, without adding seconds of latency on slow links. Rates are link rates (bits
 * of Ethernet frames), so TCP goodput is about 95 % of the rate (1448 payload bytes per 1514).
 * Delay uses netem as the root qdisc with the tbf as its child, the recipe from tc-netem(8).
 */
import { NetLabError } from "./errors.ts";

/** How one direction of a link is shaped. Every field is optional; an empty shape adds no qdisc. */
export interface LinkShape {
  /** Rate limit in Mbit/s (10^6 bit/s, like tc's "mbit"); absent means unlimited. */
  rateMbit?: number | undefined;
  /** One-way delay added by netem, in milliseconds. */
  delayMs?: number | undefined;
  /** Token-bucket size in bytes; the default scales with the rate (see {@link tbfParameters}). */
  burstBytes?: number | undefined;
  /** Queue length, as milliseconds of traffic at the rate (default {@link DEFAULT_QUEUE_MS}). */
  queueMs?: number | undefined;
}

/** The size of a full Ethernet frame as the qdisc counts it (1500-byte MTU + 14-byte header). */
export const FRAME_BYTES = 1514;
/** Smallest bucket: ten full frames, so single-packet timer jitter never starves a slow link. */
export const MIN_BURST_BYTES = 10 * FRAME_BYTES;
/** The bucket holds this many seconds of traffic at the rate when that is more than the minimum. */
export const BURST_SECONDS = 0.002;
/** Default queue: this many milliseconds of traffic at the rate (plus the bucket). */
export const DEFAULT_QUEUE_MS = 50;
/**
 * A queue never holds less than this. TCP's start-up bursts come in absolute bytes (initial window,
 * 64 KiB GSO segments, BBR's start-up gain): at 8 Mbit/s a 64-100 KB queue dropped ~1,000 packets
 * at the start of every transfer (costing a second of recovery), a 200 KB one none.
 */
export const MIN_QUEUE_BYTES = 256 * 1024;

/** The numbers behind one `tbf` qdisc. */
export interface TbfParameters {
  rateBit: number;
  burstBytes: number;
  limitBytes: number;
}

/** Computes the tbf rate, bucket and queue limit for a shape that has a rate. */
export function tbfParameters(shape: LinkShape & { rateMbit: number }): TbfParameters {
  const rateBit = Math.round(shape.rateMbit * 1e6);
  const bytesPerSecond = rateBit / 8;
  const burstBytes = shape.burstBytes ?? Math.max(MIN_BURST_BYTES, Math.ceil(bytesPerSecond * BURST_SECONDS));
  const queueBytes = Math.max(
    MIN_QUEUE_BYTES,
    Math.ceil((bytesPerSecond * (shape.queueMs ?? DEFAULT_QUEUE_MS)) / 1000),
  );
  return { rateBit, burstBytes, limitBytes: burstBytes + queueBytes };
}

/** Throws INVALID_ARGUMENT unless every number in the shape is finite and in range. */
export function validateShape(shape: LinkShape, what: string): void {
  const check = (value: number | undefined, name: string, min: number, max: number): void => {
    if (value === undefined) return;
    if (!Number.isFinite(value) || value < min || value > max) {
      throw new NetLabError(
        "INVALID_ARGUMENT",
        `${what}: ${name} must be a number in [${min}, ${max}], got ${value}`,
      );
    }
  };
  check(shape.rateMbit, "rate (Mbit/s)", 0.01, 100_000);
  check(shape.delayMs, "delayMs", 0, 60_000);
  check(shape.burstBytes, "burst (bytes)", FRAME_BYTES, 1 << 30);
  check(shape.queueMs, "queueMs", 1, 60_000);
}

/** True when the shape needs the netem qdisc. */
export function needsNetem(shape: LinkShape): boolean {
  return shape.delayMs !== undefined && shape.delayMs > 0;
}

/**
 * The `tc` argument lists (without the leading `tc -n <ns>`) that shape `device`'s egress, in order.
 * Empty when the shape neither limits the rate nor adds delay.
 */
export function shapingCommands(device: string, shape: LinkShape): string[][] {
  validateShape(shape, `shaping of ${device}`);
  const rate =
    shape.rateMbit === undefined ? undefined : tbfParameters({ ...shape, rateMbit: shape.rateMbit });
  const tbf = (where: string[]): string[] =>
    rate === undefined
      ? []
      : [
          ...where,
          "tbf",
          "rate",
          `${rate.rateBit}bit`,
          "burst",
          `${rate.burstBytes}`,
          "limit",
          `${rate.limitBytes}`,
        ];
  if (!needsNetem(shape)) {
    return rate === undefined ? [] : [tbf(["qdisc", "replace", "dev", device, "root", "handle", "1:"])];
  }
  const delayMs = shape.delayMs ?? 0;
  // netem's own queue holds the packets in flight during the delay: a bandwidth-delay product at the
  // rate (at least 1000 packets, netem's default), doubled for slack.
  const inFlight =
    rate === undefined ? 0 : Math.ceil((2 * (rate.rateBit / 8) * delayMs) / 1000 / FRAME_BYTES);
  const netem = ["qdisc", "replace", "dev", device, "root", "handle", "1:", "netem"];
  netem.push("delay", `${Math.round(delayMs * 1000)}us`, "limit", `${Math.max(1000, inFlight)}`);
  return rate === undefined
    ? [netem]
    : [netem, tbf(["qdisc", "replace", "dev", device, "parent", "1:1", "handle", "10:"])];
}

/**
 * The best payload share one TCP flow gets from a tbf-shaped Ethernet link: 1448 payload bytes in
 * each 1514-byte frame (Ethernet, IP and TCP headers with timestamps), ≈ 0.956.
 */
export const TCP_GOODPUT_PER_RATE = 1448 / 1514;

/** Payload bytes per second one TCP flow can carry over a link shaped to `mbit` Mbit/s. */
export function payloadBytesPerSecond(mbit: number): number {
  return (mbit * 1e6 * TCP_GOODPUT_PER_RATE) / 8;
}
