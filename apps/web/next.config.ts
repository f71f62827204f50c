import type { NextConfig } from "next";

const config: NextConfig = {
  // Workspace packages ship TypeScript source, so Next compiles them like app code.
  transpilePackages: ["@barnraise/protocol"],
  reactStrictMode: true,
  poweredByHeader: false,
};

export default config;
