import { MAX_METRICS_BODY_BYTES, metricsReportSchema } from "../../../../../../src/api/schemas/peer.ts";
import { readMetricsQuerySchema } from "../../../../../../src/api/schemas/public.ts";
import { parseInput } from "../../../../../../src/server/http/json-body.ts";
import { clientIp } from "../../../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../../../src/server/http/route.ts";
import { PlatformMetrics } from "../../../../../../src/server/observability/platform-metrics.ts";
import { ingestMetrics } from "../../../../../../src/server/services/ingest-metrics.ts";
import { readSignedJson } from "../../../../../../src/server/services/peer-auth.ts";
import { readMetrics } from "../../../../../../src/server/services/read-metrics.ts";

/** GET /api/v1/experiments/{id}/metrics?maxPoints=: the loss curve, downsampled for long runs. */
export const GET = route<{ id: string }>(async ({ req, params, ctx }) => {
  await ctx.rateLimits.consume("publicRead", clientIp(req));
  const query = parseInput(readMetricsQuerySchema, Object.fromEntries(new URL(req.url).searchParams));
  return json(await readMetrics(ctx, params.id, query.maxPoints));
});

/** POST /api/v1/experiments/{id}/metrics (signed aux): one aggregated step with per-peer contributions. */
export const POST = route<{ id: string }>(async ({ req, params, ctx }) => {
  const startedAt = performance.now();
  const { caller, input } = await readSignedJson(
    ctx,
    req,
    params.id,
    metricsReportSchema,
    MAX_METRICS_BODY_BYTES,
  );
  const stored = await ingestMetrics(ctx, caller, input);
  ctx.metrics.ingestion.observe(PlatformMetrics.since(startedAt));
  return json(stored);
});
