import { freemem } from "node:os";
import { join } from "node:path";
import type { ExperimentConfig } from "@barnraise/protocol";
import {
  describeBackend,
  ensureBackendTrains,
  loadModel,
  resolveBatchSize,
  type TrainableModel,
} from "@barnraise/models";
import { directoryStore, selectPeerBackend } from "@barnraise/models/node";
import type { PeerRunOptions } from "./peer-run-options.ts";

/** Share of free memory the automatic batch size may fill with activations. */
const ACTIVATION_MEMORY_SHARE = 0.25;
/** …and never more than this: the wasm backend's heap is a 32-bit address space shared with the weights. */
const MAX_ACTIVATION_BYTES = 1 << 30;

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
  options: PeerRunOptions,
  config: ExperimentConfig,
  signal: AbortSignal,
): Promise<PreparedModel> {
  const { reporter } = options;
  const { selected, benchmark } = await selectPeerBackend(options.backend, {
    server: options.server,
    directory: join(options.dataDir, "addons"),
    signal,
    log: (line) => {
      reporter.log("info", line);
    },
  });
  reporter.log("info", describeBackend(selected, benchmark));
  const model = await loadModel(config.model, {
    server: options.server,
    cache: directoryStore(join(options.dataDir, "models")),
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
  options: PeerRunOptions,
  config: ExperimentConfig,
  model: TrainableModel,
): Promise<number> {
  const requested = options.batchSize ?? config.training.localBatchSize;
  const choice = await resolveBatchSize({
    requested,
    targetBatchSize: config.training.targetBatchSize,
    model,
    memoryBytes: Math.min(freemem() * ACTIVATION_MEMORY_SHARE, MAX_ACTIVATION_BYTES),
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
