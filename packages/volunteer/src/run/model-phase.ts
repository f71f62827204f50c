import type { ExperimentConfig } from "@barnraise/protocol";
import {
  describeBackend,
  ensureBackendTrains,
  loadModel,
  resolveBatchSize,
  type TrainableModel,
} from "@barnraise/models";
import type { VolunteerOptions } from "./volunteer-options.ts";

/** The model this machine trains, on the backend it trains with, and its local batch size. */
export interface PreparedModel {
  readonly model: TrainableModel;
  readonly batchSize: number;
}

/**
 * Picks the TF.js backend (reported with its quick benchmark), builds the preset or downloads and
 * verifies the organizer's uploaded model, and chooses the local batch size. The model is disposed
 * again when a later part of this fails.
 */
export async function prepareModel(
  options: VolunteerOptions,
  config: ExperimentConfig,
  signal: AbortSignal,
): Promise<PreparedModel> {
  const { reporter, runtime } = options;
  const { selected, benchmark } = await runtime.selectBackend(options.backend, signal, (line) => {
    reporter.log("info", line);
  });
  const description = describeBackend(selected, benchmark);
  reporter.log("info", description);
  reporter.event?.({ type: "backend", description });
  const model = await loadModel(config.model, {
    server: options.server,
    cache: runtime.blobStore("models"),
    signal,
    log: (line) => {
      reporter.log("info", line);
    },
    warn: (message, error) => {
      reporter.log("warn", message, { err: error });
    },
  });
  try {
    if (model.kind.mayLackGradientKernels) {
      await ensureBackendTrains(model, (message) => {
        reporter.log("warn", message);
      });
    }
    return { model, batchSize: await chooseBatchSize(options, config, model) };
  } catch (error) {
    model.dispose();
    throw error;
  }
}

async function chooseBatchSize(
  options: VolunteerOptions,
  config: ExperimentConfig,
  model: TrainableModel,
): Promise<number> {
  const requested = options.batchSize ?? config.training.localBatchSize;
  const choice = await resolveBatchSize({
    requested,
    targetBatchSize: config.training.targetBatchSize,
    model,
    memoryBytes: options.runtime.activationMemoryBytes(),
  });
  options.reporter.log("info", `local batch size ${choice.batchSize}`, {
    requested,
    ...(choice.samplesPerSecond === undefined
      ? {}
      : { measuredSamplesPerSecond: Math.round(choice.samplesPerSecond) }),
    ...(choice.limitedBy === undefined ? {} : { limitedBy: choice.limitedBy }),
  });
  return choice.batchSize;
}
