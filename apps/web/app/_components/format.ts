/**
 * Formatting shared by server and client components. Deterministic (no locale or time zone of the
 * machine), so a client component renders the same text as the server did.
 */

/** "2026-11-21 14:03 UTC" */
export function formatTime(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

/** "1.5 MB" (decimal units, as download sizes usually are); a mean below 1 kB in whole bytes. */
export function formatBytes(bytes: number): string {
  if (Math.round(bytes) < 1000) return `${Math.round(bytes)} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let value = bytes / 1000;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value >= 100 ? value.toFixed(0) : value.toFixed(1)} ${units[unit] ?? "TB"}`;
}

/** Thousands separated by commas: "1,024". */
export function formatCount(value: number): string {
  return value.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** A share from 0 to 1 as a percentage with three significant digits: "87.3 %", "100 %", "1.5 %". */
export function formatPercent(share: number): string {
  if (!Number.isFinite(share)) return String(share);
  return `${Number((share * 100).toPrecision(3))} %`;
}

/** A loss or rate with about four significant digits. */
export function formatDecimal(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  return Number(value.toPrecision(4)).toString();
}
