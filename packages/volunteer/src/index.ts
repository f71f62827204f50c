/**
 * A volunteer's node from the join to the last step (DESIGN §1): the phases of its run, its
 * trainer, and what it tells the volunteer. The CLI peer (apps/peer) runs it on Node.js, a browser
 * tab in a Web Worker; each gives it its `VolunteerRuntime`.
 */
export * from "./run-volunteer.ts";
export * from "./run/volunteer-options.ts";
export * from "./status/peer-status.ts";
export * from "./status/units.ts";
export { TrainingAbortedError, type TrainResult } from "./training/trainer.ts";
export * from "./training/volunteer-controls.ts";
