/**
 * The shaping options of one host link, as `addHost`, `addRouter` and `connect` take them, and their
 * translation into the two tc shapes (upload and download) of the link's veth pair.
 */
import { validateShape, type LinkShape } from "./tc-shaping.ts";

/** How a host's link to a subnet is shaped. Absent fields mean "not limited". */
export interface LinkOptions {
  /** Rate of traffic leaving the host, in Mbit/s (tbf on the host end of the veth). */
  uploadMbit?: number;
  /** Rate of traffic reaching the host, in Mbit/s (tbf on the switch end of the veth). */
  downloadMbit?: number;
  /** One-way latency of the link in ms, added in both directions (netem; not in every kernel). */
  delayMs?: number;
  /** Token-bucket size in bytes, for both directions; the default scales with the rate. */
  burst?: number;
  /** Queue length in ms of traffic at the rate (default 50, at least 256 KiB). */
  queueMs?: number;
}

/** Throws INVALID_ARGUMENT unless both directions of the link are valid shapes. */
export function validateLink(link: LinkOptions, what: string): void {
  validateShape(shapeOf(link, link.uploadMbit), `${what} upload`);
  validateShape(shapeOf(link, link.downloadMbit), `${what} download`);
}

/** One direction of the link as a tc shape: `rateMbit` is that direction's rate. */
export function shapeOf(link: LinkOptions, rateMbit: number | undefined): LinkShape {
  return { rateMbit, delayMs: link.delayMs, burstBytes: link.burst, queueMs: link.queueMs };
}
