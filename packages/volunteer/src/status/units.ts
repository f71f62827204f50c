/** A link rate as volunteers read it, e.g. "9.4 Mbit/s". */
export function formatMbit(bytesPerSecond: number): string {
  return `${((bytesPerSecond * 8) / 1e6).toFixed(1)} Mbit/s`;
}
