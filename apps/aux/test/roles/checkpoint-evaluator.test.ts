import type { HeldOutScore } from "@barnraise/models";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import {
  CheckpointEvaluator,
  type CheckpointEvaluatorOptions,
  type CheckpointEvaluatorPorts,
  type CheckpointScorer,
  type EvaluationTarget,
} from "../../src/roles/checkpoint-evaluator.ts";

/** A promise resolved from outside, to hold a fake's work until the test lets it go. */
function gate() {
  let open!: () => void;
  const promise = new Promise<undefined>((resolve) => {
    open = () => {
      resolve(undefined);
    };
  });
  return { promise, open };
}

function target(step: number): EvaluationTarget {
  return { checkpointId: `checkpoint-${step}`, step, parameters: Float32Array.from([step]) };
}

const scoreOf = (parameters: Float32Array): HeldOutScore => ({
  metric: "accuracy",
  value: (parameters[0] ?? 0) / 100,
  loss: 1,
  samples: 10,
});

/** An evaluator whose scorer scores a state by its step and whose reports are recorded. */
function setup(
  ports: Partial<CheckpointEvaluatorPorts> &
    Pick<CheckpointEvaluatorOptions, "retryable" | "retryDelaysMs"> & {
      scorer?: Partial<CheckpointScorer>;
    } = {},
) {
  const logger = pino({ level: "silent" });
  const warn = vi.spyOn(logger, "warn");
  const stop = new AbortController();
  const reports: { checkpointId: string; score: HeldOutScore }[] = [];
  const scored: number[] = [];
  const disposed = vi.fn();
  const opened = vi.fn();
  const scorer: CheckpointScorer = {
    score: (parameters) => {
      scored.push(parameters[0] ?? NaN);
      return Promise.resolve(scoreOf(parameters));
    },
    dispose: disposed,
    ...ports.scorer,
  };
  const evaluator = new CheckpointEvaluator({
    logger,
    signal: stop.signal,
    openScorer: () => {
      opened();
      return Promise.resolve(scorer);
    },
    report: (checkpointId, score) => {
      reports.push({ checkpointId, score });
      return Promise.resolve();
    },
    ...ports,
  });
  return { evaluator, warn, stop, reports, scored, disposed, opened };
}

describe("CheckpointEvaluator", () => {
  it("scores a checkpoint and reports the score for its id, opening the scorer once", async () => {
    const { evaluator, reports, opened, disposed } = setup();
    evaluator.offer(target(10));
    await evaluator.idle();
    evaluator.offer(target(20));
    await evaluator.idle();
    expect(reports).toEqual([
      { checkpointId: "checkpoint-10", score: scoreOf(Float32Array.from([10])) },
      { checkpointId: "checkpoint-20", score: scoreOf(Float32Array.from([20])) },
    ]);
    expect(opened).toHaveBeenCalledTimes(1);
    await evaluator.close();
    expect(disposed).toHaveBeenCalledTimes(1);
  });

  it("runs one evaluation at a time and goes on with the newest checkpoint offered meanwhile", async () => {
    const held = gate();
    const started: number[] = [];
    const { evaluator, reports } = setup({
      scorer: {
        score: async (parameters) => {
          started.push(parameters[0] ?? NaN);
          if (started.length === 1) await held.promise;
          return scoreOf(parameters);
        },
      },
    });
    evaluator.offer(target(10));
    await vi.waitFor(() => {
      expect(started).toEqual([10]);
    });
    evaluator.offer(target(20));
    evaluator.offer(target(30));
    expect(evaluator.busy).toBe(true);
    expect(started).toEqual([10]);
    held.open();
    await evaluator.idle();
    expect(started).toEqual([10, 30]);
    expect(reports.map((report) => report.checkpointId)).toEqual(["checkpoint-10", "checkpoint-30"]);
    expect(evaluator.busy).toBe(false);
  });

  it("warns and keeps going when scoring throws, and opens the scorer again after it failed to open", async () => {
    let opens = 0;
    const { evaluator, warn, reports, scored } = setup({
      openScorer: () => {
        opens += 1;
        if (opens === 1) return Promise.reject(new Error("the dataset's manifest could not be read"));
        return Promise.resolve({
          score: (parameters: Float32Array) => {
            scored.push(parameters[0] ?? NaN);
            if (parameters[0] === 20) return Promise.reject(new Error("the model's outputs are not finite"));
            return Promise.resolve(scoreOf(parameters));
          },
          dispose: () => undefined,
        });
      },
    });
    for (const step of [10, 20, 30]) {
      evaluator.offer(target(step));
      await evaluator.idle();
    }
    expect(opens).toBe(2);
    expect(scored).toEqual([20, 30]);
    expect(reports.map((report) => report.checkpointId)).toEqual(["checkpoint-30"]);
    const messages = warn.mock.calls.map((call) => String(call[1]));
    expect(messages).toEqual([
      expect.stringContaining(
        "could not evaluate the checkpoint of step 10 on the held-out split: the dataset's manifest could not be read",
      ),
      expect.stringContaining("step 20 on the held-out split: the model's outputs are not finite"),
    ]);
  });

  it("warns and keeps going when the platform refuses the score", async () => {
    const { evaluator, warn } = setup({
      report: (checkpointId) =>
        checkpointId === "checkpoint-10"
          ? Promise.reject(new Error("the checkpoint of step 10 was already evaluated"))
          : Promise.resolve(),
    });
    evaluator.offer(target(10));
    await evaluator.idle();
    evaluator.offer(target(20));
    await evaluator.idle();
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[1])).toContain("already evaluated");
  });

  it("sends a score again after the platform failed retryably, without scoring the state again", async () => {
    const attempts: string[] = [];
    const busy = Object.assign(new Error("the platform answered 503"), { retryable: true });
    const { evaluator, warn, scored } = setup({
      retryable: (error) => (error as { retryable?: boolean }).retryable === true,
      retryDelaysMs: [1, 1, 1],
      report: (checkpointId) => {
        attempts.push(checkpointId);
        return attempts.length < 3 ? Promise.reject(busy) : Promise.resolve();
      },
    });
    evaluator.offer(target(10));
    await evaluator.idle();
    expect(attempts).toEqual(["checkpoint-10", "checkpoint-10", "checkpoint-10"]);
    expect(scored).toEqual([10]);
    expect(warn).not.toHaveBeenCalled();
  });

  it("gives a retryable failure up after the last delay, and a refusal at once", async () => {
    const attempts: string[] = [];
    const { evaluator, warn } = setup({
      retryable: (error) => (error as Error).message.includes("503"),
      retryDelaysMs: [1, 1],
      report: (checkpointId) => {
        attempts.push(checkpointId);
        return Promise.reject(new Error(checkpointId === "checkpoint-10" ? "503" : "409 already evaluated"));
      },
    });
    evaluator.offer(target(10));
    await evaluator.idle();
    evaluator.offer(target(20));
    await evaluator.idle();
    expect(attempts).toEqual(["checkpoint-10", "checkpoint-10", "checkpoint-10", "checkpoint-20"]);
    expect(warn).toHaveBeenCalledTimes(2);
  });

  it("stops with the aux: the evaluation in flight is cut short quietly and nothing else starts", async () => {
    const started: number[] = [];
    const { evaluator, stop, warn, reports } = setup({
      scorer: {
        score: (parameters, signal) =>
          new Promise<HeldOutScore>((_resolve, reject) => {
            started.push(parameters[0] ?? NaN);
            signal.addEventListener("abort", () => {
              reject(new Error("aborted", { cause: signal.reason }));
            });
          }),
      },
    });
    evaluator.offer(target(10));
    await vi.waitFor(() => {
      expect(started).toEqual([10]);
    });
    evaluator.offer(target(20));
    stop.abort();
    await evaluator.close();
    evaluator.offer(target(30));
    expect(evaluator.busy).toBe(false);
    expect(started).toEqual([10]);
    expect(reports).toEqual([]);
    expect(warn).not.toHaveBeenCalled();
  });
});
