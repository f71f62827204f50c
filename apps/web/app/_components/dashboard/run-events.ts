import { RunEventKind, type RunEventView } from "../../../src/api/schemas/public.ts";
import { formatInstant } from "./dashboard-format.ts";

/**
 * The run's restarts in words: a short label for the marker on a step axis and a sentence for the
 * list under the charts (the chart itself is a picture that a screen reader cannot read).
 */

/** "rolled back to step 20" or "resumed at step 20". */
export function markerLabel(event: Pick<RunEventView, "kind" | "step">): string {
  return event.kind === RunEventKind.rolledBack
    ? `rolled back to step ${event.step}`
    : `resumed at step ${event.step}`;
}

/**
 * "2026-11-21 14:03:07 UTC: the organizer rolled the run back from step 30 to the checkpoint of
 * step 20." Worded apart from the marker label, so a page search for one finds just the marker.
 */
export function describeRunEvent(event: RunEventView): string {
  const ms = Date.parse(event.at);
  const at = Number.isFinite(ms) ? formatInstant(ms) : event.at;
  const from = event.fromStep === null ? "" : ` from step ${event.fromStep}`;
  return event.kind === RunEventKind.rolledBack
    ? `${at}: the organizer rolled the run back${from} to the checkpoint of step ${event.step}.`
    : `${at}: the swarm restarted${from} from the state of step ${event.step}.`;
}
