import type { MetricsIngested, MetricsReport } from "../../api/schemas/peer.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import type { AuxCaller } from "../records.ts";

/**
 * An aux monitor posts one aggregated collaborative step with each peer's cumulative contribution.
 *
 * - A report of an older rollback generation than the run's is refused (STALE_GENERATION).
 * - The step's metric (its bytes per peer, utilization and samples null when the aux leaves them out)
 *   is inserted into the run's current timeline if that timeline has no row for the step yet, and
 *   never updated: steps only move forward, and a repeated step (a restarted monitor, a swarm that
 *   resumed from an older state) leaves the recorded one as it was. A step further past the
 *   timeline's last recorded one than the run can have gone since (`reachableStep`) is not stored
 *   and is logged. The response says whether it was stored, the timeline, and the timeline's last
 *   recorded step. Points the organizer discarded count for neither that reference nor the last
 *   step, so a forged step far ahead stops moving them once discarded; a discarded step still holds
 *   its place, and a report of it again is not stored (the organizer restores it instead).
 * - For each reported peer session this experiment knows, its Contribution row (per peer and
 *   session, so a restarted node keeps every session's credit) takes the maximum of the stored and
 *   the reported counters (samples and compute time within the credit bound below), so cumulative counters never go backwards (a restarted or lagging monitor
 *   may report older values), and the longest session is the longest seen.
 * - A node's credit grows by what its reported totals grew since the largest reported before
 *   (`Contribution.reportedSamples`), and no faster than the run can have trained (`creditBound`):
 *   its samples by at most twice the swarm's throughput (the aux's heartbeat) over the time since
 *   its credit was last reported (or since the aux first saw its session), plus four steps' worth;
 *   its compute time by no more than the time passed. The aux refuses records whose totals outgrow
 *   what their sender announced, but takes a session's first total as it comes: a first record that
 *   claims 2^47 samples is credited what the bound allows once, and its repetitions nothing. Cut
 *   reports are logged.
 * - Those peers and the calling aux peer are marked as seen now, and a trainer's `averaging` flag, when
 *   reported, is stored on its node (a node with two sessions in one report averages if either does).
 * - Unknown peers are ignored and counted in the response.
 *
 * Reports are group-committed (see `MetricsIngestion` in ../metrics-ingestion.ts). The insert and the maximum are done by the
 * database in INSERT … ON CONFLICT statements (portable SQL, the same on SQLite and PostgreSQL), so
 * two monitors or two web instances reporting at once can neither overwrite a step nor move a
 * counter backwards.
 */
export async function ingestMetrics(
  ctx: AppContext,
  caller: AuxCaller,
  report: MetricsReport,
): Promise<MetricsIngested> {
  const { generation } = caller.experiment;
  if (report.generation < generation) {
    throw new AppError(
      AppErrorCode.STALE_GENERATION,
      `the report is of generation ${report.generation}, but the run was rolled back to generation ${generation}`,
    );
  }
  return ctx.ingestion.write(caller, report);
}
