import { defineConfig } from "vitest/config";

/**
 * The scale tests (`npm run test:scale`): many real nodes in one process over worker threads, for a
 * machine with cores to spare. They are not part of `npm test`: on two cores, 64 libp2p nodes
 * saturate the CPU for minutes, and although the averaging's deadlines no longer count a process's
 * own stalls, a run still fails now and then (members miss their cell while waiting for a core).
 */
export default defineConfig({
  test: {
    include: ["packages/*/test/scale/**/*.scale.ts"],
    testTimeout: 600_000,
    fileParallelism: false,
  },
});
