import * as tf from "@tensorflow/tfjs-core";
import "@tensorflow/tfjs-backend-cpu";
import { parseExperimentConfig } from "@barnraise/protocol";
import { beforeAll, describe, expect, it } from "vitest";
import { AlbertMlm } from "../../src/models/albert-mlm.ts";
import { createModel } from "../../src/models/model-kinds.ts";
import { MnistMlp } from "../../src/models/mnist-mlp.ts";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe("createModel", () => {
  it("builds the preset a parsed config names, with its hyperparameters", () => {
    const mlp = createModel(parseExperimentConfig({}).model);
    expect(mlp).toBeInstanceOf(MnistMlp);
    expect(mlp.config).toEqual({ kind: "mnist-mlp", hiddenUnits: [128, 64], activation: "relu" });
    const albertConfig = parseExperimentConfig({
      model: { kind: "albert-mlm", vocabSize: 100, hiddenSize: 16, numHeads: 2, intermediateSize: 32 },
    }).model;
    const albert = createModel(albertConfig);
    expect(albert).toBeInstanceOf(AlbertMlm);
    expect(albert.layout.slots.find((slot) => slot.name === "mlm.output.bias")?.length).toBe(100);
    mlp.dispose();
    albert.dispose();
  });

  it("two models of one preset live side by side without variable-name clashes", async () => {
    const config = parseExperimentConfig({ model: { kind: "mnist-mlp", hiddenUnits: [4] } }).model;
    const a = createModel(config);
    const b = createModel(config);
    a.setParameters(a.initialParameters(1));
    b.setParameters(new Float32Array(b.layout.size));
    const batch = {
      kind: "image" as const,
      size: 1,
      pixels: new Float32Array(784).fill(0.5),
      labels: new Int32Array([3]),
    };
    expect((await b.evaluate(batch)).loss).toBeCloseTo(Math.log(10), 5);
    expect((await a.evaluate(batch)).loss).not.toBeCloseTo(Math.log(10), 3);
    a.dispose();
    b.dispose();
  });
});
