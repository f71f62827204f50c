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
  };
}
