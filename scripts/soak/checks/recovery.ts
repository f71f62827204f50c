import type { RestartFigure } from "../restart-figures.ts";
import type { CheckResult } from "../types.ts";
import { iso, median } from "./format.ts";

/**
 * Every restart was followed by a shared step and, after an aux restart, by the new aux posting a
 * step (or the restarted process was stopped again too soon to tell).
 */
export function checkRecovery(figures: readonly RestartFigure[]): CheckResult {
  const never = figures.filter((figure) => figure.outcome === "never");
  const times = figures.flatMap((figure) =>
    figure.secondsToSharedStep === null ? [] : [figure.secondsToSharedStep],
  );
  const interrupted = figures.filter((figure) => figure.outcome === "interrupted").length;
  return {
    name: "recovery",
    pass: never.length === 0,
    summary:
      `${figures.length - never.length - interrupted}/${figures.length} restarts followed by a shared step` +
      (times.length === 0
        ? ""
        : ` (median ${median(times).toFixed(1)} s, max ${Math.max(...times).toFixed(1)} s)`) +
      (interrupted === 0 ? "" : `, ${interrupted} stopped again too soon to tell`),
    details: never.map((figure) => {
      const what = `the ${figure.kind}${figure.target === null ? "" : ` of ${figure.target}`} at ${iso(figure.at)}`;
      return figure.secondsToSharedStep === null
        ? `no shared step after ${what}`
        : `the new aux posted no step to the platform after ${what} (the peers went on without it)`;
    }),
  };
}
