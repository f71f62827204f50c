import { ProtocolError, ProtocolErrorCode } from "@barnraise/protocol";
import { AppError, appErrorStatus, type InputIssue } from "../app-error.ts";
import { getAppContext, type AppContext } from "../context.ts";
import { PlatformMetrics, routePattern } from "../observability/platform-metrics.ts";

/** The error body every route returns: `{ "error": { "code", "message", "issues"? } }`. */
export interface ErrorBody {
  readonly error: {
    readonly code: string;
    readonly message: string;
    readonly issues?: readonly InputIssue[];
  };
}

export interface RouteInput<P> {
  readonly req: Request;
  readonly params: P;
  readonly ctx: AppContext;
}

type NextRouteContext<P> = { params: Promise<P> };

/**
 * Wraps a route handler: gives it the app context and its params, and turns every thrown error into
 * one JSON error shape. AppError and ProtocolError codes map to statuses here and nowhere else.
 */
export function route<P = Record<string, never>>(
  handler: (input: RouteInput<P>) => Promise<Response>,
): (req: Request, context: NextRouteContext<P>) => Promise<Response> {
  return async (req, context) => {
    const startedAt = performance.now();
    let ctx: AppContext | undefined;
    let params: P | undefined;
    let response: Response;
    try {
      ctx = getAppContext();
      params = await context.params;
      response = await handler({ req, params, ctx });
    } catch (error) {
      response = errorResponse(error, ctx);
    }
    if (ctx !== undefined) {
      const pattern = routePattern(new URL(req.url).pathname, params ?? {});
      ctx.metrics.httpRequests.inc({ route: pattern, method: req.method, status: String(response.status) });
      ctx.metrics.httpDuration.observe(
        { route: pattern, method: req.method },
        PlatformMetrics.since(startedAt),
      );
    }
    return response;
  };
}

const protocolStatus: Partial<Record<ProtocolErrorCode, number>> = {
  [ProtocolErrorCode.MALFORMED]: 400,
  [ProtocolErrorCode.OVERSIZED]: 413,
  [ProtocolErrorCode.NON_CANONICAL]: 400,
  [ProtocolErrorCode.INVALID_KEY]: 400,
  [ProtocolErrorCode.PEER_ID_NOT_ED25519]: 400,
  [ProtocolErrorCode.CONFIG_INVALID]: 400,
  [ProtocolErrorCode.REQUEST_REPLAYED]: 409,
  [ProtocolErrorCode.REPLAY_STORE_FULL]: 503,
  [ProtocolErrorCode.BODY_MISMATCH]: 400,
};

export function errorResponse(error: unknown, ctx?: AppContext): Response {
  if (error instanceof AppError) {
    return errorJson(appErrorStatus[error.code], error.code, error.message, error.issues, error.headers);
  }
  if (error instanceof ProtocolError) {
    // Authentication failures of signed requests are 401 unless listed above.
    return errorJson(protocolStatus[error.code] ?? 401, error.code, error.message);
  }
  ctx?.logger.error({ err: error }, "unhandled error in route");
  return errorJson(500, "INTERNAL", "internal error");
}

function errorJson(
  status: number,
  code: string,
  message: string,
  issues?: readonly InputIssue[],
  headers?: Readonly<Record<string, string>>,
): Response {
  const body: ErrorBody = { error: { code, message, ...(issues ? { issues } : {}) } };
  return Response.json(body, { status, headers: { "cache-control": "no-store", ...headers } });
}

/** A JSON response that is never cached (API data changes with every step). */
export function json(
  body: unknown,
  init: { status?: number; headers?: Record<string, string> } = {},
): Response {
  return Response.json(body, {
    status: init.status ?? 200,
    headers: { "cache-control": "no-store", ...init.headers },
  });
}
