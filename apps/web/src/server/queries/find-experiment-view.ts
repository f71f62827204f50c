import { AppErrorCode, isAppError } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { readExperiment, type ExperimentView } from "../services/read-experiment.ts";

/**
 * An experiment's public view for a page, or null when there is no such experiment (the page shows
 * its 404). Any other error is a bug and propagates.
 */
export async function findExperimentView(ctx: AppContext, id: string): Promise<ExperimentView | null> {
  try {
    return await readExperiment(ctx, id);
  } catch (error) {
    if (isAppError(error) && error.code === AppErrorCode.NOT_FOUND) return null;
    throw error;
  }
}
