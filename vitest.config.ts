import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: [
      "packages/*/test/**/*.test.ts",
      "apps/*/test/**/*.test.ts",
      "prisma/test/**/*.test.ts",
      "scripts/soak/test/**/*.test.ts",
    ],
    exclude: ["**/node_modules/**", "e2e/**"],
    testTimeout: 30_000,
    globalSetup: ["./vitest.global-setup.ts"],
  },
});
