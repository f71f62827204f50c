/** A broadcast wake-up: every waiter resumes on the next `notify` and re-checks its condition. */
export class Wakeup {
  #waiters: Array<(value: undefined) => void> = [];

  wait(): Promise<undefined> {
    const { promise, resolve } = Promise.withResolvers<undefined>();
    this.#waiters.push(resolve);
    return promise;
  }

  notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const resolve of waiters) resolve(undefined);
  }
}
