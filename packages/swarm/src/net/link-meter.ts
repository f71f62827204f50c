/**
 * How fast this peer's link is, as the load balancer needs it (DeDLOC §3.2: each peer's share of
 * the all-reduce follows its bandwidth). Two sources, as DeDLOC's volunteers measured theirs with a
 * speed test at start:
 * - a probe: a timed transfer each way against an aux peer (a server, usually faster than a home
 *   link), at start and again every few minutes;
 * - the peer's own all-reduce traffic: the bytes each round sent and received over its duration.
 *   A round waits for its slowest member, so this is a lower bound of the link's capacity: it can
 *   raise the estimate (the probe's aux was the bottleneck) but never lower it.
 * The estimate of each direction is the larger of the latest probe and the best of the last
 * `windowRounds` rounds. Before either: a conservative default (about 100 Mbit/s), said as such.
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
}

/** A round's traffic: below these it says more about latency than about bandwidth, and is ignored. */
const MIN_SAMPLE_BYTES = 64 << 10;
const MIN_SAMPLE_SECONDS = 0.01;

interface Rates {
  readonly up: number;
  readonly down: number;
}

export class LinkMeter {
  readonly #configured: LinkMeterOptions["configured"];
  readonly #windowRounds: number;
  #probe: Rates | undefined;
  readonly #rounds: Rates[] = [];

  constructor(options: LinkMeterOptions = {}) {
    this.#configured = options.configured;
    this.#windowRounds = options.windowRounds ?? 8;
  }

  /** A probe's result: bytes each way and the seconds each took. */
  probed(sample: {
    readonly uploadBytes: number;
    readonly uploadSeconds: number;
    readonly downloadBytes: number;
    readonly downloadSeconds: number;
  }): void {
    this.#probe =
      rates(sample.uploadBytes, sample.uploadSeconds, sample.downloadBytes, sample.downloadSeconds) ??
      this.#probe;
  }

  /** One all-reduce round of this peer: bytes written and read on the wire, and its duration. */
  observed(sample: {
    readonly bytesSent: number;
    readonly bytesReceived: number;
    readonly seconds: number;
  }): void {
    const round = rates(sample.bytesSent, sample.seconds, sample.bytesReceived, sample.seconds);
    if (round === undefined) return;
    this.#rounds.push(round);
    if (this.#rounds.length > this.#windowRounds) this.#rounds.shift();
  }

  current(): LinkEstimate {
    const configured = this.#configured;
    if (configured !== undefined) return { ...configured, source: "configured" };
    const roundsUp = Math.max(0, ...this.#rounds.map((round) => round.up));
    const roundsDown = Math.max(0, ...this.#rounds.map((round) => round.down));
    const probe = this.#probe;
    if (probe === undefined && roundsUp === 0 && roundsDown === 0) {
      return {
        uploadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
        downloadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
        source: "default",
      };
    }
    const up = Math.max(probe?.up ?? 0, roundsUp);
    const down = Math.max(probe?.down ?? 0, roundsDown);
    const fromTraffic = roundsUp > (probe?.up ?? 0) || roundsDown > (probe?.down ?? 0);
    return {
      // A direction nothing measured yet (an aux sends little) borrows the other's rate.
      uploadBytesPerSecond: up > 0 ? up : down,
      downloadBytesPerSecond: down > 0 ? down : up,
      source: probe === undefined || fromTraffic ? "traffic" : "probe",
    };
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
