/**
 * What a run must undo whatever happens (dispose the model, close the batches, leave the swarm),
 * undone in the reverse order it was set up. A cleanup that fails is logged; the others still run.
 */
export class Cleanups {
  readonly #steps: (() => Promise<void> | void)[] = [];

  add(step: () => Promise<void> | void): void {
    this.#steps.push(step);
  }

  async run(onError: (error: unknown) => void): Promise<void> {
    for (const step of this.#steps.splice(0).reverse()) {
      try {
        await step();
      } catch (error) {
        onError(error);
      }
    }
  }
}
