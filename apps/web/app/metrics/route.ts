import { timingSafeEqual } from "node:crypto";
import { AppError, AppErrorCode } from "../../src/server/app-error.ts";
import { route } from "../../src/server/http/route.ts";
import { collectRunGauges } from "../../src/server/observability/run-gauges.ts";

/**
 * GET /metrics: the platform's Prometheus metrics in the text format, for a scraper that sends
 * `Authorization: Bearer $BARNRAISE_METRICS_TOKEN`. Without that variable the endpoint is off (404);
 * a wrong or missing secret is 401. docs/metrics.md lists every metric.
 */
export const GET = route(async ({ req, ctx }) => {
  const expected = ctx.env.metricsToken;
  if (expected === undefined) {
    throw new AppError(
      AppErrorCode.NOT_FOUND,
      "metrics are off on this platform: set BARNRAISE_METRICS_TOKEN and scrape with that bearer token",
    );
  }
  const sent = /^Bearer (.+)$/.exec(req.headers.get("authorization") ?? "")?.[1] ?? "";
  if (!sameSecret(sent, expected)) {
    throw new AppError(AppErrorCode.UNAUTHENTICATED, "send Authorization: Bearer <BARNRAISE_METRICS_TOKEN>", {
      headers: { "www-authenticate": 'Bearer realm="metrics"' },
    });
  }
  await collectRunGauges(ctx);
  return new Response(await ctx.metrics.registry.metrics(), {
    headers: { "content-type": ctx.metrics.registry.contentType, "cache-control": "no-store" },
  });
});

function sameSecret(sent: string, expected: string): boolean {
  const a = Buffer.from(sent);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}
