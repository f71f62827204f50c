"use client";

import { useRouter } from "next/navigation";
import { useState, useTransition, type SubmitEvent } from "react";
import type { DiscardedMetricPoints } from "../../src/server/services/discard-metric-points.ts";
import type { DiscardedMetricPointList } from "../../src/server/services/list-discarded-metric-points.ts";
import { callApi, describeFailure } from "./api-client.ts";
import { formatCount, formatDecimal, formatTime } from "./format.ts";
import { formText } from "./form-text.ts";
import { StatusLine, type MutationStatus } from "./mutation.tsx";

/** Where the organizer's discards and restores are posted. */
export function discardPath(experimentId: string): string {
  return `/api/v1/experiments/${encodeURIComponent(experimentId)}/metrics/discard`;
}

/** "step 7" or "steps 7 to 9". */
function stepsText(fromStep: number, toStep: number): string {
  return fromStep === toStep
    ? `step ${formatCount(fromStep)}`
    : `steps ${formatCount(fromStep)} to ${formatCount(toStep)}`;
}

/** What the page says once a discard or restore is done. */
export function discardedText(result: DiscardedMetricPoints): string {
  const steps = stepsText(result.fromStep, result.toStep);
  const points = `${result.changed} point${result.changed === 1 ? "" : "s"}`;
  if (result.discarded) {
    return result.changed === 0
      ? `No point of ${steps} was left to discard.`
      : `Discarded ${points} of ${steps}: no view shows them now.`;
  }
  return result.changed === 0
    ? `No point of ${steps} was discarded.`
    : `Restored ${points} of ${steps}: they are on the loss curve again.`;
}

/**
 * The organizer's loss-curve points: a form that discards (or restores) the points of a range of
 * steps, and the list of discarded points, each with a Restore button. A hostile volunteer or a
 * broken aux can put wrong points on the public curve; discarded, they leave every view.
 */
export function LossCurvePoints({
  experimentId,
  timeline,
  discarded,
}: {
  readonly experimentId: string;
  /** The run's current metric timeline: the form's default. */
  readonly timeline: number;
  readonly discarded: DiscardedMetricPointList;
}) {
  const router = useRouter();
  const [status, setStatus] = useState<MutationStatus>(null);
  const [busy, setBusy] = useState(false);
  const [refreshing, startRefresh] = useTransition();
  // The run restarted (a rollback or a resume): the form asks which curve.
  const restarted = timeline > 0;

  async function post(body: {
    fromStep: number;
    toStep: number;
    discarded: boolean;
    timeline: number;
  }): Promise<void> {
    setBusy(true);
    setStatus(null);
    const result = await callApi<DiscardedMetricPoints>("POST", discardPath(experimentId), body);
    setBusy(false);
    if (!result.ok) {
      setStatus({ kind: "error", text: describeFailure(result) });
      return;
    }
    setStatus({ kind: "ok", text: discardedText(result.data) });
    startRefresh(() => {
      router.refresh();
    });
  }

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    // The form's two buttons: Discard, and Restore for a range too long to list.
    const restore = event.submitter instanceof HTMLButtonElement && event.submitter.value === "restore";
    await post({
      fromStep: Number(formText(form, "fromStep")),
      toStep: Number(formText(form, "toStep")),
      discarded: !restore,
      timeline: restarted ? Number(formText(form, "timeline")) : timeline,
    });
  }

  return (
    <div className="stack">
      <p>
        A hostile volunteer or a broken aux can put wrong points on the public loss curve. Discard them here:
        they leave the dashboard, the metrics API and alerts, and the platform no longer measures from them
        how far the next step may jump ahead. Their steps stay taken, so the same step reported again is not
        stored; restore a point to show it again.
      </p>
      <form className="stack" aria-label="Discard loss curve points" onSubmit={(event) => void submit(event)}>
        <div className="grid-2">
          <div className="field">
            <label htmlFor="discard-from-step">From step</label>
            <input id="discard-from-step" name="fromStep" type="number" min={0} step={1} required />
          </div>
          <div className="field">
            <label htmlFor="discard-to-step">To step</label>
            <input id="discard-to-step" name="toStep" type="number" min={0} step={1} required />
          </div>
          {restarted ? (
            <div className="field">
              <label htmlFor="discard-timeline">Timeline</label>
              <input
                id="discard-timeline"
                name="timeline"
                type="number"
                min={0}
                max={timeline}
                step={1}
                required
                defaultValue={timeline}
              />
            </div>
          ) : null}
        </div>
        {restarted ? (
          <p className="hint">
            The run restarted {timeline === 1 ? "once" : `${timeline} times`}; timeline {timeline} is the
            current curve.
          </p>
        ) : null}
        <div className="actions">
          <button
            type="submit"
            value="discard"
            className="button button-small button-danger"
            disabled={busy || refreshing}
          >
            Discard
          </button>
          <button
            type="submit"
            value="restore"
            className="button button-small button-quiet"
            disabled={busy || refreshing}
          >
            Restore
          </button>
        </div>
      </form>
      {discarded.total === 0 ? (
        <p className="muted" data-testid="discarded-points-empty">
          No point is discarded.
        </p>
      ) : (
        <div className="table-wrap">
          <table data-testid="discarded-points" aria-label="Discarded points">
            <thead>
              <tr>
                {restarted ? <th scope="col">Timeline</th> : null}
                <th scope="col" className="num">
                  Step
                </th>
                <th scope="col" className="num">
                  Loss
                </th>
                <th scope="col">Recorded</th>
                <th scope="col">Discarded</th>
                <th scope="col">
                  <span className="visually-hidden">Restore</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {discarded.points.map((point) => (
                <tr
                  key={`${point.timeline}-${point.step}`}
                  data-testid="discarded-point-row"
                  data-step={point.step}
                >
                  {restarted ? <td>{point.timeline}</td> : null}
                  <td className="num">{formatCount(point.step)}</td>
                  <td className="num">{formatDecimal(point.loss)}</td>
                  <td>
                    <time dateTime={point.recordedAt}>{formatTime(point.recordedAt)}</time>
                  </td>
                  <td>
                    <time dateTime={point.discardedAt}>{formatTime(point.discardedAt)}</time>
                  </td>
                  <td>
                    <div className="actions">
                      <button
                        type="button"
                        className="button button-small button-quiet"
                        disabled={busy || refreshing}
                        aria-label={`Restore step ${point.step}`}
                        onClick={() =>
                          void post({
                            fromStep: point.step,
                            toStep: point.step,
                            discarded: false,
                            timeline: point.timeline,
                          })
                        }
                      >
                        Restore
                      </button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {discarded.total > discarded.points.length ? (
        <p className="hint">
          The first {discarded.points.length} of {formatCount(discarded.total)} discarded points are listed;
          restore the others as a range with the form.
        </p>
      ) : null}
      <StatusLine status={status} />
    </div>
  );
}
