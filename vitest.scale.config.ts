import { defineConfig } from "vitest/config";

/**
 * The scale tests (`npm run test:scale`): many real nodes in one process, for a machine with cores
 * to spare. They are not part of `npm test`: on two cores, 64 libp2p nodes saturate the CPU and
 * the averaging's sender deadlines (5 s at least) then cut members that are only waiting for a core.
 */
export default defineConfig({
  test: {
    include: ["packages/*/test/scale/**/*.scale.ts"],
    testTimeout: 600_000,
    fileParallelism: false,
  },
});
