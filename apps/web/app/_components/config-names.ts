import { AveragingStrategy, CompressionMethod, type ExperimentConfig } from "@barnraise/protocol";
import { formatPercent } from "./format.ts";

/** How the pages name an experiment's averaging: its strategy and its compression. */

type Averaging = ExperimentConfig["averaging"];
type Compression = ExperimentConfig["compression"];

export const strategyNames: Record<Averaging["strategy"], string> = {
  dedloc: "DeDLOC",
  diloco: "DiLoCo",
};

const compressionNames: Record<Compression["method"], string> = {
  none: "None",
  fp16: "fp16",
  uniform8: "8-bit uniform",
  quantile8: "8-bit quantile",
  blockwise8: "Blockwise 8-bit",
  adaptive: "Adaptive",
  topk: "Top-k + error feedback",
};

/** "Blockwise 8-bit"; top-k with its density: "Top-k 1.5 % + error feedback". */
export function compressionName(compression: Compression): string {
  return compression.method === CompressionMethod.topk
    ? `Top-k ${formatPercent(compression.topkDensity)} + error feedback`
    : compressionNames[compression.method];
}

/**
 * The strategy in a phrase: "DeDLOC: gradients averaged to the target batch, one shared step", or
 * DiLoCo with its outer optimizer: "DiLoCo: local steps, outer Nesterov SGD (learning rate 0.7,
 * momentum 0.9)".
 */
export function strategyDescription(averaging: Averaging): string {
  if (averaging.strategy === AveragingStrategy.dedloc) {
    return `${strategyNames.dedloc}: gradients averaged to the target batch, one shared step`;
  }
  const outer = averaging.outerOptimizer;
  // Without momentum, Nesterov's look-ahead changes nothing: it is plain SGD.
  const sgd = outer.nesterov && outer.momentum > 0 ? "Nesterov SGD" : "SGD";
  return `${strategyNames.diloco}: local steps, outer ${sgd} (learning rate ${outer.learningRate}, momentum ${outer.momentum})`;
}
