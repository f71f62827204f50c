import type { Cast } from "./cast.ts";
import {
  checkCredit,
  checkOneModel,
  checkPlatformLog,
  checkProcesses,
  checkRecorded,
  checkRecovery,
  checkStepSamples,
  checkStepsForward,
} from "./checks.ts";
import {
  auxHistories,
  auxRevokedDrops,
  auxSplitWarnings,
  incarnationViews,
  peerHistories,
  platformErrors,
} from "./evidence.ts";
import type { WindDown } from "./lifecycle.ts";
import type { Observer } from "./observer.ts";
import { restartFigures, type RestartFigure } from "./restart-figures.ts";
import type { ChaosRecord, CheckResult } from "./types.ts";

/** All of the soak's checks over what it observed, and the restart figures. */
export interface Verdict {
  readonly results: readonly CheckResult[];
  readonly figures: readonly RestartFigure[];
  readonly pass: boolean;
}

export function judge(cast: Cast, observer: Observer, chaos: readonly ChaosRecord[], end: WindDown): Verdict {
  const peers = peerHistories(cast);
  const metrics = observer.metrics ?? { points: [], total: 0, events: [] };
  const figures = restartFigures({
    chaos,
    peers,
    checkpoints: observer.checkpoints,
    auxRuns: auxHistories(cast),
  });
  const recordedAt = metrics.points.map((point) => Date.parse(point.recordedAt));
  const credit = checkCredit(observer.leaderboard ?? { entries: [] }, peers, {
    ...(recordedAt.length === 0 ? {} : { lastRecordedAt: Math.max(...recordedAt) }),
    revokedDrops: auxRevokedDrops(cast),
    revokedAt: chaos.filter((action) => action.kind === "retoken").map((action) => action.startedAt),
  });
  const results = [
    checkStepsForward({
      metrics,
      checkpoints: observer.checkpoints,
      snapshotProblems: observer.snapshotProblems,
      figures,
      peers,
    }),
    checkOneModel({
      peers,
      sampleTimes: observer.samples.map((sample) => sample.at),
      auxSplitWarnings: auxSplitWarnings(cast),
      platformSplitSamples: observer.samples.filter((sample) => sample.split !== null).length,
    }),
    { ...credit, details: [...credit.details, ...end.notes] },
    checkStepSamples(metrics.points, peers),
    checkRecorded(end.lastLoggedStep, end.lastRecordedStep),
    checkPlatformLog(platformErrors(cast), chaos),
    checkProcesses(incarnationViews(cast), chaos),
    checkRecovery(figures),
  ];
  return { results, figures, pass: results.every((result) => result.pass) };
}
