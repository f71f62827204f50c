/**
 * Small helpers the volunteer-peer benchmarks (bench/peer-backends.ts, bench/peer-swarm-throughput.ts)
 * share for their summaries: a median that resists one slow run, a plain-text table, and an error's
 * first line for a table footnote.
 */

/** The median of a non-empty list (NaN for an empty one). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] ?? NaN)
    : ((sorted[mid - 1] ?? NaN) + (sorted[mid] ?? NaN)) / 2;
}

/**
 * Lines of a table: the header, a rule, then the rows; the first `leftColumns` columns are
 * left-aligned (names), the others right-aligned (numbers).
 */
export function formatTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  leftColumns = 1,
): string[] {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const line = (cells: readonly string[]): string =>
    widths
      .map((width, column) => {
        const text = cells[column] ?? "";
        return column < leftColumns ? text.padEnd(width) : text.padStart(width);
      })
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((width) => "-".repeat(width)).join("  "), ...rows.map(line)];
}

/** An integer with thousands separators: 12,345. */
export function formatCount(value: number): string {
  return Number.isFinite(value) ? Math.round(value).toLocaleString("en-US") : "-";
}

/** The first line of an error's message. */
export function firstLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split("\n")[0] ?? "";
}
