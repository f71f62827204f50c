/**
 * Lets pending I/O and timers run before going on: Node.js's `setImmediate` where there is one (it
 * does not wait for a timer tick), a zero timeout elsewhere.
 */
export function yieldToEvents(): Promise<void> {
  const immediate = (globalThis as { setImmediate?: (callback: () => void) => unknown }).setImmediate;
  return new Promise((resolve) => {
    if (immediate === undefined) setTimeout(resolve, 0);
    else immediate(resolve);
  });
}
