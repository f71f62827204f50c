/** Formatting shared by the checks' messages. */

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? 0)
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

export function iso(time: number): string {
  return new Date(time).toISOString();
}

export function shorten(text: string, max = 400): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}
