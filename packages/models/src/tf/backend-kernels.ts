import * as tf from "@tensorflow/tfjs-core";
import type { TrainableModel } from "../models/trainable-model.ts";
import { syntheticBatch } from "../data/synthetic-batch.ts";
import { cpuBackendLoader, selectBackend } from "./backend.ts";

/** TF.js's message when a backend has no kernel for an operation: "Kernel 'X' not registered for backend 'y'". */
const MISSING_KERNEL = /Kernel '([^']+)' not registered for backend '([^']+)'/;

/**
 * Makes sure the active backend can train `model`: one gradient step on a one-row synthetic batch.
 * Backends do not all implement every gradient (the wasm backend has no Conv2DBackpropFilter, so it
 * cannot train a convolution); when a kernel is missing, training moves to the cpu backend, which
 * has them all, and `warn` says why. Resolves with the backend that trains. Any other failure is
 * the model's and is thrown as it is.
 */
export async function ensureBackendTrains(
  model: TrainableModel,
  warn: (message: string) => void,
): Promise<string> {
  const probe = async () => {
    const batch = syntheticBatch(model.kind, 1, 0);
    model.setParameters(model.initialParameters(0));
    await model.computeGradients(batch, 0);
  };
  try {
    await probe();
    return tf.getBackend();
  } catch (error) {
    const missing = error instanceof Error ? MISSING_KERNEL.exec(error.message) : null;
    if (missing === null || tf.getBackend() === "cpu") throw error;
    warn(
      `the ${missing[2]} backend has no ${missing[1]} kernel, which training this model needs; ` +
        "training on the cpu backend instead (slower)",
    );
    await selectBackend("cpu", { loaders: { cpu: cpuBackendLoader } });
    await probe();
    return tf.getBackend();
  }
}
