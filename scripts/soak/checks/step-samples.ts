import type { MetricPoint } from "../../../apps/web/src/api/schemas/public.ts";
import type { CheckResult, PeerHistory } from "../types.ts";
import { iso } from "./format.ts";

/** The share of compared steps whose samples may disagree with the peers' (a round redone without the aux). */
export const STEP_SAMPLES_TOLERANCE = 0.02;
/** A peer's step line counts for a recorded point logged at most this long before the point. */
const MATCH_WINDOW_MS = 60_000;

/**
 * The samples of each recorded step, two views of one fact: those the aux accepted into the step's
 * averaging round (the platform's point, `samples`) and those the trainers' round put into their
 * step (the peers' shared step lines, `samples`). A point is compared with the latest shared line of
 * the same step each peer logged in the minute before the point was recorded; it agrees when some
 * peer's line has its samples. Points whose round the aux did not reduce a part of have no samples
 * and are counted apart; so are points no peer line matches. At most 2 % of the compared points
 * may disagree (a round the trainers redid without the aux after the aux's own part succeeded), and
 * at least one point must carry samples when the peers logged shared steps.
 */
export function checkStepSamples(points: readonly MetricPoint[], peers: readonly PeerHistory[]): CheckResult {
  let withSamples = 0;
  let unmatched = 0;
  let agree = 0;
  const details: string[] = [];
  for (const point of points) {
    if (point.samples === null) continue;
    withSamples += 1;
    const recordedAt = Date.parse(point.recordedAt);
    const logged = peers.flatMap((peer) => {
      const lines = peer.steps.filter(
        (line) =>
          line.shared &&
          line.step === point.step &&
          line.time <= recordedAt &&
          line.time >= recordedAt - MATCH_WINDOW_MS,
      );
      const latest = lines.at(-1);
      return latest === undefined ? [] : [latest.samples];
    });
    if (logged.length === 0) {
      unmatched += 1;
      continue;
    }
    if (logged.includes(point.samples)) {
      agree += 1;
    } else if (details.length < 20) {
      details.push(
        `step ${point.step} (timeline ${point.timeline}, recorded ${iso(recordedAt)}): the platform ${point.samples}, the peers' lines ${logged.join(", ")}`,
      );
    }
  }
  const compared = withSamples - unmatched;
  const disagree = compared - agree;
  const sharedLines = peers.some((peer) => peer.steps.some((line) => line.shared));
  const pass = disagree <= STEP_SAMPLES_TOLERANCE * compared && (withSamples > 0 || !sharedLines);
  if (withSamples === 0 && sharedLines) {
    details.unshift("no recorded step carries samples, though the peers took shared steps");
  }
  return {
    name: "step samples",
    pass,
    summary: `${points.length} points, ${withSamples} with samples; ${compared} compared with the peers' step lines: ${agree} agree, ${disagree} disagree (at most ${Math.round(STEP_SAMPLES_TOLERANCE * 100)} %); ${unmatched} with no peer line`,
    details,
  };
}
