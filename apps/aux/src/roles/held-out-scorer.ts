import type { ExperimentConfig } from "@barnraise/protocol";
import type { Logger } from "pino";
import type { HeldOutScorer } from "./checkpoint-evaluator.ts";

export interface HeldOutScorerOptions {
  readonly config: ExperimentConfig;
  readonly server: URL;
  /** The aux's data directory: shards are cached under `datasets/`, an uploaded model under `models/`. */
  readonly dataDir: string;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/**
 * The real scorer: the peer's `HeldOutEvaluator` (its model, dataset and backend code, on the
 * WebAssembly or plain JavaScript backend), reading the test split from the platform. TF.js is
 * imported here, on the first checkpoint, so an aux run with `--no-evaluate` never loads it.
 */
export async function openHeldOutScorer(options: HeldOutScorerOptions): Promise<HeldOutScorer> {
  const { HeldOutEvaluator, directoryStore, nodeBackendLoaders } = await import("@barnraise/models/node");
  const { logger } = options;
  const evaluator = await HeldOutEvaluator.open({
    config: options.config,
    server: options.server,
    cache: directoryStore(options.dataDir),
    backends: nodeBackendLoaders,
    signal: options.signal,
    log: (line) => {
      logger.info(line);
    },
    warn: (message, error) => {
      logger.warn(error === undefined ? {} : { err: error }, message);
    },
  });
  logger.info(
    { backend: evaluator.backend.name, parameters: evaluator.parameterCount },
    "ready to evaluate checkpoints on the held-out split",
  );
  return {
    score: (parameters, signal) => evaluator.evaluate(parameters, signal),
    loss: (parameters, signal, lossOptions) => evaluator.loss(parameters, signal, lossOptions),
    dispose: () => {
      evaluator.dispose();
    },
  };
}
