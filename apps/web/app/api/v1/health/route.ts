import { SignatureDomain } from "@barnraise/protocol";
import packageJson from "../../../../package.json" with { type: "json" };
import { getAppContext } from "../../../../src/server/context.ts";

export interface HealthResponse {
  readonly status: "ok";
  readonly version: string;
  /** The platform's clock, Unix milliseconds: `barnraise-peer doctor` measures this machine's offset from it. */
  readonly time: number;
  readonly protocol: { readonly signatureDomains: readonly SignatureDomain[] };
}

/** Liveness check for load balancers and tests; it also names the protocol this build speaks and the time. */
export function GET(): Response {
  const body: HealthResponse = {
    status: "ok",
    version: packageJson.version,
    time: getAppContext().now(),
    protocol: { signatureDomains: Object.values(SignatureDomain) },
  };
  return Response.json(body, { headers: { "cache-control": "no-store" } });
}
