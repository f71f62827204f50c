/**
 * How fast this peer's link is, as the load balancer needs it (DeDLOC §3.2: each peer's share of
 * the all-reduce follows its bandwidth). Two sources, as DeDLOC's volunteers measured theirs with a
 * speed test at start:
 * - a probe: a timed transfer each way against an aux peer (a server, usually faster than a home
 *   link), at start and again every few minutes;
 * - the peer's own all-reduce traffic: the bytes each round sent and received over its duration.
 *   A round waits for its slowest member, so this is a lower bound of the link's capacity: it can
 *   raise the estimate (the probe's aux was the bottleneck) but never lower it below a probe.
 * The estimate of each direction is the larger of the latest probe and the best of the last
 * `windowRounds` rounds. Before either: a conservative default (about 100 Mbit/s), said as such.
 *
 * Without a probe, a round's traffic replaces the default only when the round was long enough to be
 * about bandwidth: its bytes would have taken at least BANDWIDTH_BOUND_SECONDS at the estimate in
 * force then. A small vector's round (a few hundred KB in ~2 s, the time going to compression,
 * round trips and waiting for the group's slowest member) would otherwise turn a 50 Mbit/s link's
 * default into 50–300 KB/s (seen in the netns lab), and every deadline and load-balancing share
 * built on it 40–250 times too slow. Such a round can still raise the estimate. A threshold in time
 * at the current estimate, rather than in bytes, lets later rounds lower it further once a large
 * transfer showed the link slow, and bounds the error: a round with O seconds of overhead reads at
 * worst (1 + O / BANDWIDTH_BOUND_SECONDS) times too slow.
 */

/** A conservative link capacity (≈100 Mbit/s) until something was measured. */
export const DEFAULT_LINK_BYTES_PER_SECOND = 12_500_000;

/** Where an estimate comes from. */
export type LinkSource = "default" | "configured" | "probe" | "traffic";

export interface LinkEstimate {
  readonly uploadBytesPerSecond: number;
  readonly downloadBytesPerSecond: number;
  readonly source: LinkSource;
}

export interface LinkMeterOptions {
  /** A fixed capacity (an operator's setting, or a lab that knows its links): never measured. */
  readonly configured?: { readonly uploadBytesPerSecond: number; readonly downloadBytesPerSecond: number };
  /** Rounds whose traffic counts; default 8. */
  readonly windowRounds?: number;
  /**
   * The volunteer's caps (`--max-upload`, `--max-download`): whatever is measured or configured,
   * the link offers no more than this in a direction, since the node keeps to it.
   */
  readonly cap?: { readonly uploadBytesPerSecond?: number; readonly downloadBytesPerSecond?: number };
}

/** A round's traffic: below these it says more about latency than about bandwidth, and is ignored. */
const MIN_SAMPLE_BYTES = 64 << 10;
const MIN_SAMPLE_SECONDS = 0.01;
/**
 * A round's direction may replace the default only if its bytes would have taken this long at the
 * estimate in force (see the class comment).
 */
const BANDWIDTH_BOUND_SECONDS = 1;

interface Rates {
  readonly up: number;
  readonly down: number;
}

/** A round's rates, and for each direction whether it was long enough to stand for the bandwidth. */
interface RoundRates extends Rates {
  readonly upBound: boolean;
  readonly downBound: boolean;
}

/**
 * Whether `link` is the default capacity in both directions: what a peer offers before it measured
 * anything (matchmaking's offers carry the rates only, so this is how other members' are told).
 */
export function isDefaultLink(link: {
  readonly uploadBytesPerSecond: number;
  readonly downloadBytesPerSecond: number;
}): boolean {
  return (
    link.uploadBytesPerSecond === DEFAULT_LINK_BYTES_PER_SECOND &&
    link.downloadBytesPerSecond === DEFAULT_LINK_BYTES_PER_SECOND
  );
}

export class LinkMeter {
  readonly #configured: LinkMeterOptions["configured"];
  readonly #windowRounds: number;
  readonly #cap: LinkMeterOptions["cap"];
  #probe: Rates | undefined;
  readonly #rounds: RoundRates[] = [];

  constructor(options: LinkMeterOptions = {}) {
    this.#configured = options.configured;
    this.#windowRounds = options.windowRounds ?? 8;
    this.#cap = options.cap;
  }

  /** A probe's result: bytes each way and the seconds each took. */
  probed(sample: {
    readonly uploadBytes: number;
    readonly uploadSeconds: number;
    readonly downloadBytes: number;
    readonly downloadSeconds: number;
  }): void {
    // A probe of a megabyte that ends within the shortest sample (on loopback or a LAN) shows a link
    // at least that fast: it counts as having taken that long, a lower bound on the rate.
    const atLeast = (seconds: number) => (seconds >= 0 ? Math.max(seconds, MIN_SAMPLE_SECONDS) : seconds);
    this.#probe =
      rates(
        sample.uploadBytes,
        atLeast(sample.uploadSeconds),
        sample.downloadBytes,
        atLeast(sample.downloadSeconds),
      ) ?? this.#probe;
  }

  /** One all-reduce round of this peer: bytes written and read on the wire, and its duration. */
  observed(sample: {
    readonly bytesSent: number;
    readonly bytesReceived: number;
    readonly seconds: number;
  }): void {
    const round = rates(sample.bytesSent, sample.seconds, sample.bytesReceived, sample.seconds);
    if (round === undefined) return;
    const before = this.current();
    this.#rounds.push({
      ...round,
      upBound: sample.bytesSent >= BANDWIDTH_BOUND_SECONDS * before.uploadBytesPerSecond,
      downBound: sample.bytesReceived >= BANDWIDTH_BOUND_SECONDS * before.downloadBytesPerSecond,
    });
    if (this.#rounds.length > this.#windowRounds) this.#rounds.shift();
  }

  /** The link's capacity as far as it is known, within the volunteer's caps. */
  current(): LinkEstimate {
    const estimate = this.#estimate();
    const cap = this.#cap;
    if (cap === undefined) return estimate;
    return {
      uploadBytesPerSecond: Math.min(estimate.uploadBytesPerSecond, cap.uploadBytesPerSecond ?? Infinity),
      downloadBytesPerSecond: Math.min(
        estimate.downloadBytesPerSecond,
        cap.downloadBytesPerSecond ?? Infinity,
      ),
      source: estimate.source,
    };
  }

  #estimate(): LinkEstimate {
    const configured = this.#configured;
    if (configured !== undefined) return { ...configured, source: "configured" };
    const probe = this.#probe;
    const up = this.#direction(
      probe?.up,
      (round) => round.up,
      (round) => round.upBound,
    );
    const down = this.#direction(
      probe?.down,
      (round) => round.down,
      (round) => round.downBound,
    );
    if (up === undefined && down === undefined) {
      return {
        uploadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
        downloadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
        source: "default",
      };
    }
    const fromTraffic =
      probe === undefined || this.#rounds.some((round) => round.up > probe.up || round.down > probe.down);
    return {
      // A direction nothing measured yet (an aux sends little) borrows the other's rate.
      uploadBytesPerSecond: up ?? down ?? DEFAULT_LINK_BYTES_PER_SECOND,
      downloadBytesPerSecond: down ?? up ?? DEFAULT_LINK_BYTES_PER_SECOND,
      source: fromTraffic ? "traffic" : "probe",
    };
  }

  /** One direction's estimate, or undefined while nothing measured it (the default stands). */
  #direction(
    probe: number | undefined,
    rate: (round: RoundRates) => number,
    bound: (round: RoundRates) => boolean,
  ): number | undefined {
    const best = Math.max(0, ...this.#rounds.map(rate));
    if (probe !== undefined && probe > 0) return Math.max(probe, best);
    // Short rounds are only lower bounds: they may raise the default, never replace it.
    const replaced = this.#rounds.some((round) => bound(round) && rate(round) > 0);
    if (replaced || best > DEFAULT_LINK_BYTES_PER_SECOND) return best;
    return undefined;
  }
}

/** Both directions' rates, or undefined when neither sample says anything. */
function rates(
  upBytes: number,
  upSeconds: number,
  downBytes: number,
  downSeconds: number,
): Rates | undefined {
  const up = rate(upBytes, upSeconds);
  const down = rate(downBytes, downSeconds);
  return up === 0 && down === 0 ? undefined : { up, down };
}

function rate(bytes: number, seconds: number): number {
  if (!Number.isFinite(bytes) || !Number.isFinite(seconds)) return 0;
  if (bytes < MIN_SAMPLE_BYTES || seconds < MIN_SAMPLE_SECONDS) return 0;
  return bytes / seconds;
}
