import { elementCount, LAYERS_MODEL, type ExperimentConfig } from "@barnraise/protocol";
import { AppError, AppErrorCode, type InputIssue } from "../app-error.ts";
import { isAppError } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { getDatasetManifest } from "../datasets/dataset-store.ts";
import { readStoredModelSummary } from "../models/model-store.ts";

/**
 * Before a run over an uploaded model is published (or its config changed): the model is stored,
 * the dataset is prepared, and they fit each other: the model's input takes one record's features,
 * and its output and the loss fit the label (classes for classification, one value for regression).
 * Peers check the same again when they build their batches; this gives the organizer the message in
 * the form instead. Presets train on their own datasets and need no check here.
 */
export async function checkModelFitsDataset(ctx: AppContext, config: ExperimentConfig): Promise<void> {
  const { model } = config;
  if (model.preset !== LAYERS_MODEL) return;
  const issues: InputIssue[] = [];
  const refuse = (path: string, message: string) => issues.push({ path: `config.${path}`, message });
  const [stored, manifest] = await Promise.all([
    notFoundAsUndefined(readStoredModelSummary(ctx.env.dataDir, model.sha256)),
    notFoundAsUndefined(getDatasetManifest(ctx.env.dataDir, config.dataset.name)),
  ]);
  if (stored === undefined)
    refuse("model.sha256", "no uploaded model has this SHA-256; upload the model first");
  if (manifest === undefined) {
    refuse("dataset.name", `dataset ${config.dataset.name} does not exist; upload and convert it first`);
  } else if (manifest.format !== "tabular-f32") {
    refuse("dataset.name", `an uploaded model trains on an uploaded tabular dataset, not ${manifest.format}`);
  }
  if (stored !== undefined && manifest?.format === "tabular-f32") {
    const { features, label } = manifest.record;
    const inputs = elementCount(stored.inputShape);
    if (inputs !== features.count) {
      refuse(
        "model.sha256",
        `the model takes ${inputs} inputs (shape [${stored.inputShape.join(", ")}]); ${manifest.name} has ${features.count} feature columns`,
      );
    }
    if (model.task === "classification") {
      if (label.kind !== "class" || label.classes === null) {
        refuse(
          "model.task",
          `${manifest.name}'s label "${label.name}" is a number to regress on, not a class`,
        );
      } else if (label.classes.length < 2) {
        refuse(
          "dataset.name",
          `${manifest.name} has ${label.classes.length} class; classification needs at least 2`,
        );
      } else if (stored.outputUnits !== label.classes.length) {
        refuse(
          "model.sha256",
          `the model's output layer has ${stored.outputUnits} units; ${manifest.name} has ${label.classes.length} classes`,
        );
      }
      if (stored.outputActivation !== "softmax" && stored.outputActivation !== "linear") {
        refuse(
          "model.loss",
          `${model.loss} needs a softmax (probabilities) or linear (logits) output, not ${stored.outputActivation}`,
        );
      }
    } else {
      if (label.kind !== "value") {
        refuse("model.task", `${manifest.name}'s label "${label.name}" is a class; choose classification`);
      }
      if (stored.outputUnits !== 1) {
        refuse(
          "model.sha256",
          `a regression model needs one output unit; this one has ${stored.outputUnits}`,
        );
      }
      if (stored.outputActivation === "softmax") {
        refuse("model.sha256", "a regression model's output cannot be a softmax");
      }
    }
  }
  if (issues.length > 0) {
    throw new AppError(AppErrorCode.INVALID_INPUT, `${issues[0]?.path}: ${issues[0]?.message}`, { issues });
  }
}

async function notFoundAsUndefined<T>(promise: Promise<T>): Promise<T | undefined> {
  try {
    return await promise;
  } catch (error) {
    if (isAppError(error) && error.code === AppErrorCode.NOT_FOUND) return undefined;
    throw error;
  }
}
