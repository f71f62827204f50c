import { describe, expect, it, vi } from "vitest";
import type { HeldOutScorer } from "../../src/roles/checkpoint-evaluator.ts";
import { SharedScorer } from "../../src/roles/shared-scorer.ts";

/** One model for the checkpoint evaluator and the validator: built once, scores in turn, freed last. */

function fakeModel(log: string[]): { model: HeldOutScorer; disposed: ReturnType<typeof vi.fn<() => void>> } {
  const disposed = vi.fn<() => void>();
  const model: HeldOutScorer = {
    score: async (parameters) => {
      log.push(`score ${parameters[0]} start`);
      await new Promise((resolve) => setTimeout(resolve, 5));
      log.push(`score ${parameters[0]} end`);
      return { metric: "accuracy", value: 0.5, loss: 1, samples: 10 };
    },
    loss: async (parameters) => {
      log.push(`loss ${parameters[0]} start`);
      await new Promise((resolve) => setTimeout(resolve, 1));
      log.push(`loss ${parameters[0]} end`);
      return parameters[0] ?? 0;
    },
    dispose: disposed,
  };
  return { model, disposed };
}

describe("SharedScorer", () => {
  it("builds the model once for every handle, runs one score at a time in order, and frees it with the last handle", async () => {
    const log: string[] = [];
    const { model, disposed } = fakeModel(log);
    const build = vi.fn(() => Promise.resolve(model));
    const shared = new SharedScorer(build);
    const signal = new AbortController().signal;
    const [evaluator, validator] = await Promise.all([shared.open(signal), shared.open(signal)]);
    expect(build).toHaveBeenCalledTimes(1);

    const results = await Promise.all([
      evaluator.score(Float32Array.of(1), signal),
      validator.loss(Float32Array.of(2), signal, { maxBatches: 1 }),
      validator.loss(Float32Array.of(3), signal, { maxBatches: 1 }),
    ]);
    expect(results[1]).toBe(2);
    expect(log).toEqual([
      "score 1 start",
      "score 1 end",
      "loss 2 start",
      "loss 2 end",
      "loss 3 start",
      "loss 3 end",
    ]);

    evaluator.dispose();
    evaluator.dispose();
    await validator.loss(Float32Array.of(4), signal, { maxBatches: 1 });
    expect(disposed).not.toHaveBeenCalled();
    await expect(evaluator.loss(Float32Array.of(5), signal, { maxBatches: 1 })).rejects.toThrow(/disposed/);
    validator.dispose();
    await vi.waitFor(() => {
      expect(disposed).toHaveBeenCalledTimes(1);
    });
  });

  it("builds again after a failed build", async () => {
    const log: string[] = [];
    const build = vi
      .fn<(signal: AbortSignal) => Promise<HeldOutScorer>>()
      .mockRejectedValueOnce(new Error("no dataset yet"))
      .mockResolvedValue(fakeModel(log).model);
    const shared = new SharedScorer(build);
    const signal = new AbortController().signal;
    await expect(shared.open(signal)).rejects.toThrow("no dataset yet");
    const handle = await shared.open(signal);
    expect(await handle.loss(Float32Array.of(7), signal, { maxBatches: 1 })).toBe(7);
    expect(build).toHaveBeenCalledTimes(2);
  });
});
