import { describe, expect, it } from "vitest";
import { BackendUnavailableError, cpuBackendLoader, selectBackend } from "../../src/tf/backend.ts";

/**
 * The backend choice of the browser-ready core: the runtime gives the loaders it has, and a
 * backend without one is unavailable (the Node.js loaders are tested in test/node/node-backends.test.ts).
 */
describe("selectBackend with the loaders a runtime has", () => {
  it("refuses a backend this runtime has no loader for, saying so", async () => {
    const error = await selectBackend("wasm", { loaders: { cpu: cpuBackendLoader } }).then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(error).toBeInstanceOf(BackendUnavailableError);
    expect((error as Error).message).toMatch(
      /backend "wasm" is unavailable: .* is not available in this runtime/,
    );
  });

  it("takes, for auto, the first backend this runtime has a loader for", async () => {
    const selected = await selectBackend("auto", { loaders: { cpu: cpuBackendLoader } });
    expect(selected.name).toBe("cpu");
    expect(selected.skipped.map((skipped) => skipped.name)).toEqual([
      "tensorflow-gpu",
      "tensorflow",
      "wasm",
      "webgpu",
    ]);
    expect(selected.skipped.every((skipped) => skipped.reason === "is not available in this runtime")).toBe(
      true,
    );
  });
});
