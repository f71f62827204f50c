/**
 * The element at `index`, or a clear error when there is none. Tests use it instead of `items[i]!`, so
 * an index that is out of range fails with a message instead of passing `undefined` along.
 */
export function at<T>(items: ArrayLike<T>, index: number): T {
  const item = items[index];
  if (item === undefined) {
    throw new Error(`no element at index ${index} (length ${items.length})`);
  }
  return item;
}
