import { SignatureDomain } from "@barnraise/protocol";
import packageJson from "../../../../package.json" with { type: "json" };
import { getAppContext } from "../../../../src/server/context.ts";

export interface HealthResponse {
  /** "unavailable" (with status 503) when the platform cannot use its storage. */
  readonly status: "ok" | "unavailable";
  readonly version: string;
  /** The platform's clock, Unix milliseconds: `barnraise-peer doctor` measures this machine's offset from it. */
  readonly time: number;
  readonly protocol: { readonly signatureDomains: readonly SignatureDomain[] };
  /** Checkpoints, models and datasets: the data directory or the S3-compatible store. */
  readonly storage: { readonly status: "ok" } | { readonly status: "unavailable"; readonly message: string };
}

/**
 * Liveness check for load balancers and tests; it also names the protocol this build speaks and the
 * time. It checks the storage too (the data directory is writable, or the S3 bucket answers): when
 * it is not usable the answer is 503, and the log says why (endpoint, bucket and error).
 */
export async function GET(): Promise<Response> {
  const ctx = getAppContext();
  let storage: HealthResponse["storage"] = { status: "ok" };
  try {
    await ctx.storage.check();
  } catch (error) {
    ctx.logger.error({ err: error }, "storage is not usable");
    storage = {
      status: "unavailable",
      message: "the platform cannot reach its storage for checkpoints, models and datasets; its log says why",
    };
  }
  const body: HealthResponse = {
    status: storage.status,
    version: packageJson.version,
    time: ctx.now(),
    protocol: { signatureDomains: Object.values(SignatureDomain) },
    storage,
  };
  return Response.json(body, {
    status: storage.status === "ok" ? 200 : 503,
    headers: { "cache-control": "no-store" },
  });
}
