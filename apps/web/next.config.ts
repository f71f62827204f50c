import type { NextConfig } from "next";
import { PHASE_DEVELOPMENT_SERVER, PHASE_PRODUCTION_SERVER } from "next/constants";
import { loadServerEnv } from "./src/server/env.ts";

export default function nextConfig(phase: string): NextConfig {
  // Validate the environment when a server starts, so a missing secret stops it right there.
  if (phase === PHASE_PRODUCTION_SERVER || phase === PHASE_DEVELOPMENT_SERVER) loadServerEnv();
  return {
    // Workspace packages ship TypeScript source, so Next compiles them like app code.
    transpilePackages: ["@barnraise/protocol", "@barnraise/prisma"],
    reactStrictMode: true,
    poweredByHeader: false,
    // Every page and route but the tab's files, which carry their own policy.
    headers: () =>
      Promise.resolve([
        {
          source: "/:path((?!api/v1/tab/).*)",
          headers: [{ key: "content-security-policy", value: PAGE_CSP }],
        },
      ]),
  };
}

/**
 * What the platform's pages may do beyond the defaults: no page of another site frames them (a
 * framed "Contribute from this browser" could be clicked unawares), no plugins, no base rewrite, and
 * workers only from the platform itself (the tab's, GET /api/v1/tab/{file}, has its own policy).
 */
const PAGE_CSP = ["frame-ancestors 'none'", "object-src 'none'", "base-uri 'self'", "worker-src 'self'"].join(
  "; ",
);
