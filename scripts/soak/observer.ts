import type {
  CheckpointView,
  Leaderboard,
  MetricPoint,
  MetricSeries,
} from "../../apps/web/src/api/schemas/public.ts";
import type { Cast } from "./cast.ts";
import { checkpointSnapshotProblems, indexMetrics, metricSnapshotProblems } from "./checks.ts";
import { sleep } from "./waits.ts";

/**
 * Every 5 s: reads what the processes logged since the last time (so a line without its own time is
 * known to within 5 s), and the platform's public API: the swarm's alive peers and split, the
 * recorded steps, the leaderboard and the checkpoints. Each read of the steps and checkpoints is
 * compared with the ones before (nothing recorded is rewritten or lost). The samples' times are the
 * moments the one-model check judges.
 */

export const SAMPLE_EVERY_MS = 5_000;

export interface ApiSample {
  readonly at: number;
  /** Why the platform could not be read, or null. */
  readonly error: string | null;
  readonly alivePeers: number | null;
  readonly split: string | null;
  readonly recordedSteps: number | null;
  readonly lastStep: number | null;
  readonly leaderboardSamples: number | null;
  readonly checkpoints: number | null;
}

export class Observer {
  readonly samples: ApiSample[] = [];
  readonly snapshotProblems: string[] = [];
  metrics: MetricSeries | undefined;
  leaderboard: Leaderboard | undefined;
  checkpoints: readonly CheckpointView[] = [];
  readonly #cast: Cast;
  #knownMetrics = new Map<string, MetricPoint>();
  #knownCheckpoints = new Map<string, CheckpointView>();

  constructor(cast: Cast) {
    this.#cast = cast;
  }

  /** Samples every SAMPLE_EVERY_MS until `signal` aborts (then resolves). */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const started = Date.now();
      await this.sample();
      await sleep(Math.max(0, SAMPLE_EVERY_MS - (Date.now() - started)), signal).catch(() => undefined);
    }
  }

  /** Reads the logs, then the platform; a platform that does not answer is a sample with an error. */
  async sample(): Promise<ApiSample> {
    const at = Date.now();
    this.pollLogs(at);
    const client = this.#cast.client;
    let sample: ApiSample;
    try {
      const [swarm, metrics, leaderboard, checkpoints] = await Promise.all([
        client.swarm(),
        client.metrics(),
        client.leaderboard(),
        client.checkpoints(),
      ]);
      this.snapshotProblems.push(
        ...metricSnapshotProblems(this.#knownMetrics, metrics),
        ...checkpointSnapshotProblems(this.#knownCheckpoints, checkpoints.checkpoints),
      );
      this.#knownMetrics = new Map([...this.#knownMetrics, ...indexMetrics(metrics)]);
      this.#knownCheckpoints = new Map([
        ...this.#knownCheckpoints,
        ...checkpoints.checkpoints.map((checkpoint) => [checkpoint.id, checkpoint] as const),
      ]);
      this.metrics = metrics;
      this.leaderboard = leaderboard;
      this.checkpoints = checkpoints.checkpoints;
      sample = {
        at,
        error: null,
        alivePeers: swarm.alivePeers,
        split: swarm.split === null ? null : swarm.split.summary,
        recordedSteps: metrics.total,
        lastStep: lastStep(metrics),
        leaderboardSamples: leaderboard.entries.reduce((sum, entry) => sum + entry.samples, 0),
        checkpoints: checkpoints.checkpoints.length,
      };
    } catch (error) {
      sample = {
        at,
        error: error instanceof Error ? error.message : String(error),
        alivePeers: null,
        split: null,
        recordedSteps: null,
        lastStep: null,
        leaderboardSamples: null,
        checkpoints: null,
      };
    }
    this.samples.push(sample);
    return sample;
  }

  /** Reads every log tail; `final` also takes a last line without its newline. */
  pollLogs(at: number, final = false): void {
    for (const process of this.#cast.processes) {
      for (const incarnation of process.incarnations) incarnation.tail.poll(at, final);
    }
  }
}

/** The highest step of the newest timeline, or null before the first. */
export function lastStep(metrics: MetricSeries): number | null {
  const timeline = Math.max(-1, ...metrics.points.map((point) => point.timeline));
  const steps = metrics.points.filter((point) => point.timeline === timeline).map((point) => point.step);
  return steps.length === 0 ? null : Math.max(...steps);
}
