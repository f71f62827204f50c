import { z } from "zod";
import {
  checkpointListSchema,
  leaderboardSchema,
  MAX_METRIC_POINTS,
  metricSeriesSchema,
  swarmStatusSchema,
  type CheckpointList,
  type Leaderboard,
  type MetricSeries,
  type SwarmStatusView,
} from "../../apps/web/src/api/schemas/public.ts";

/**
 * The platform's public read API, as a visitor calls it: answers are checked against the platform's
 * own response schemas (apps/web/src/api/schemas/public.ts), so a changed shape fails loudly.
 */

/** Every request gets this long; the platform may be restarting. */
const REQUEST_TIMEOUT_MS = 10_000;

const experimentSwarmSchema = z.object({ swarm: swarmStatusSchema });

export class PlatformClient {
  readonly baseUrl: string;
  readonly #experimentId: string;

  constructor(baseUrl: string, experimentId: string) {
    this.baseUrl = baseUrl;
    this.#experimentId = experimentId;
  }

  /** True when GET /api/v1/health answers 200. */
  async healthy(): Promise<boolean> {
    try {
      const res = await fetch(`${this.baseUrl}/api/v1/health`, { signal: AbortSignal.timeout(5_000) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  }

  /** The experiment's `swarm`: alive peers and the split the aux reported. */
  async swarm(): Promise<SwarmStatusView> {
    return (await this.#get("", experimentSwarmSchema)).swarm;
  }

  /** Every recorded step (up to the API's maximum, beyond which it downsamples) and the run's events. */
  metrics(): Promise<MetricSeries> {
    return this.#get(`/metrics?maxPoints=${MAX_METRIC_POINTS}`, metricSeriesSchema);
  }

  leaderboard(): Promise<Leaderboard> {
    return this.#get("/leaderboard", leaderboardSchema);
  }

  checkpoints(): Promise<CheckpointList> {
    return this.#get("/checkpoints", checkpointListSchema);
  }

  async #get<T>(path: string, schema: z.ZodType<T>): Promise<T> {
    const url = `${this.baseUrl}/api/v1/experiments/${this.#experimentId}${path}`;
    const res = await fetch(url, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status} ${await res.text()}`);
    return schema.parse(await res.json());
  }
}
