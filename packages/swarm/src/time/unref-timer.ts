/**
 * Lets the program end while `timer` is still pending, where the runtime has the notion (Node.js
 * timers have `unref`); elsewhere (a browser's timers are numbers) there is nothing to do.
 */
export function unrefTimer(timer: unknown): void {
  if (typeof timer === "object" && timer !== null && "unref" in timer && typeof timer.unref === "function") {
    (timer as { unref(): void }).unref();
  }
}
