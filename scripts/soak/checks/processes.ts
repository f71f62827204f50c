import { incarnationId, type ChaosRecord, type CheckResult, type IncarnationView } from "../types.ts";
import { iso } from "./format.ts";

/**
 * Every process ended only when the soak ended it or expected it to (a revoked peer: code 10), with
 * the expected code, in time; and every chaos action was carried out.
 */
export function checkProcesses(
  incarnations: readonly IncarnationView[],
  chaos: readonly ChaosRecord[],
): CheckResult {
  const problems: string[] = [];
  for (const incarnation of incarnations) {
    const id = incarnationId(incarnation);
    const { exit, stop } = incarnation;
    const how = exit === null ? "running" : exit.signal === null ? `code ${exit.code}` : exit.signal;
    if (incarnation.forced !== null) problems.push(`${id} ${incarnation.forced}; killed`);
    else if (exit !== null && stop === null) {
      problems.push(
        `${id} exited by itself (${how}) at ${iso(incarnation.endedAt ?? 0)}; see ${incarnation.logFile}`,
      );
    } else if (
      exit !== null &&
      stop?.expectCodes !== undefined &&
      !stop.expectCodes.includes(exit.code ?? -1)
    ) {
      problems.push(
        `${id} ended with ${how} after "${stop.reason}", expected code ${stop.expectCodes.join(" or ")}`,
      );
    } else if (exit === null) problems.push(`${id} is still running at the end`);
  }
  for (const record of chaos) {
    if (record.failure !== null)
      problems.push(`chaos ${record.kind} at ${iso(record.startedAt)} failed: ${record.failure}`);
  }
  return {
    name: "processes",
    pass: problems.length === 0,
    summary: `${incarnations.length} process runs, ${chaos.length} chaos actions; ${problems.length} problem(s)`,
    details: problems,
  };
}
