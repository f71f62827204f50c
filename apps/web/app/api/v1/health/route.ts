import { SignatureDomain } from "@barnraise/protocol";
import packageJson from "../../../../package.json" with { type: "json" };

export interface HealthResponse {
  readonly status: "ok";
  readonly version: string;
  readonly protocol: { readonly signatureDomains: readonly SignatureDomain[] };
}

/** Liveness check for load balancers and tests; it also names the protocol this build speaks. */
export function GET(): Response {
  const body: HealthResponse = {
    status: "ok",
    version: packageJson.version,
    protocol: { signatureDomains: Object.values(SignatureDomain) },
  };
  return Response.json(body, { headers: { "cache-control": "no-store" } });
}
