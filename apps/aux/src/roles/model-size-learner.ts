import type { Swarm } from "@barnraise/swarm";
import type { Logger } from "pino";
import type { BackgroundTasks } from "../background-tasks.ts";
import { downloadState } from "./download-state.ts";

/**
 * The averaging helper needs the model's parameter count before it can take part in a round: once
 * the swarm has stepped, this learns it from the first state a trainer serves (unless a checkpoint
 * told it first), trying again on the next tick after a failure.
 */
export class ModelSizeLearner {
  readonly #swarm: Swarm;
  readonly #logger: Logger;
  readonly #learned: (length: number) => void;
  #done = false;

  constructor(swarm: Swarm, logger: Logger, learned: (length: number) => void) {
    this.#swarm = swarm;
    this.#logger = logger;
    this.#learned = learned;
  }

  tick(step: number, generation: number, signal: AbortSignal, background: BackgroundTasks): void {
    if (this.#done || step <= 0) return;
    this.#done = true;
    background.run(
      downloadState(this.#swarm, 0, generation, signal).then(
        (state) => {
          this.#learned(state.parameters.length);
        },
        (error: unknown) => {
          this.#done = false;
          this.#logger.debug({ err: error }, "could not learn the model's size yet");
        },
      ),
    );
  }
}
