import { describe, expect, it } from "vitest";
import { logOptimizerEvents } from "../../src/status/optimizer-events.ts";

function recorder() {
  const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
  return {
    lines,
    reporter: {
      log: (
        level: "info" | "warn" | "error" | "debug",
        message: string,
        fields?: Record<string, unknown>,
      ) => {
        lines.push({ level, message, ...(fields === undefined ? {} : { fields }) });
      },
    },
  };
}

const failed = (epoch: number) =>
  ({
    type: "round-failed",
    epoch,
    localSamples: 64,
    error: new Error("no group formed for e3/r0/"),
  }) as const;

describe("logOptimizerEvents", () => {
  it("says plainly, every third failure in a row, that the peer's gradients are not reaching the swarm", () => {
    const { lines, reporter } = recorder();
    const log = logOptimizerEvents(reporter);
    for (let k = 0; k < 6; k++) log(failed(3));
    const plain = lines.filter((line) => line.message.startsWith("averaging failed"));
    expect(plain.map((line) => line.fields?.failedInARow)).toEqual([3, 6]);
    expect(plain[0]?.level).toBe("warn");
    expect(plain[0]?.message).toContain("no group formed for e3/r0/");
    expect(plain[0]?.message).toContain("could not reach member");
    // Each failure is still logged on its own.
    expect(lines.filter((line) => line.message.startsWith("averaging for step 4 failed"))).toHaveLength(6);
  });

  it("counts again from zero after a step", () => {
    const { lines, reporter } = recorder();
    const log = logOptimizerEvents(reporter);
    log(failed(3));
    log(failed(3));
    log({
      type: "step",
      epoch: 4,
      groupSize: 2,
      totalWeight: 128,
      localSamples: 64,
      shared: true,
      learningRate: 0.001,
      gradientNorm: 1,
      stateDigest: "0123456789abcdef",
      soloSteps: 0,
    });
    log(failed(4));
    log(failed(4));
    expect(lines.filter((line) => line.message.startsWith("averaging failed"))).toHaveLength(0);
  });

  it("says plainly, every third step in a row taken with no other trainer, that the samples do not count", () => {
    const { lines, reporter } = recorder();
    const log = logOptimizerEvents(reporter);
    const step = (epoch: number, shared: boolean) => {
      log({
        type: "step",
        epoch,
        groupSize: shared ? 2 : 1,
        totalWeight: shared ? 128 : 64,
        localSamples: 64,
        shared,
        learningRate: 0.001,
        gradientNorm: 1,
        stateDigest: "0123456789abcdef",
        soloSteps: shared ? 0 : 1,
      });
    };
    step(1, false);
    step(2, false);
    step(3, true); // one shared step starts the count again
    for (let epoch = 4; epoch < 10; epoch++) step(epoch, false);
    const plain = lines.filter((line) => line.message.includes("with no other trainer"));
    expect(plain.map((line) => line.fields?.aloneInARow)).toEqual([3, 6]);
    expect(plain[0]?.level).toBe("warn");
    expect(plain[0]?.message).toContain("do not count");
  });
});
