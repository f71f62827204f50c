/**
 * Human formats for the dashboard that `../format.ts` does not have: durations, compact counts and
 * clock times. Deterministic (UTC, no machine locale), so the server and the browser render the same
 * text.
 */

import { formatCount } from "../format.ts";

const durationUnits = [
  { seconds: 86_400, label: "d" },
  { seconds: 3_600, label: "h" },
  { seconds: 60, label: "min" },
  { seconds: 1, label: "s" },
] as const;

/**
 * A duration in its two largest units, rounded to the second: "45 s", "3 min 20 s", "3 h 4 min",
 * "2 d 5 h". Whole larger units drop the smaller one: "2 h", not "2 h 0 min".
 */
export function formatDuration(totalSeconds: number): string {
  if (!Number.isFinite(totalSeconds) || totalSeconds < 0) return "—";
  let rest = Math.round(totalSeconds);
  const parts: string[] = [];
  for (const unit of durationUnits) {
    const amount = Math.floor(rest / unit.seconds);
    rest -= amount * unit.seconds;
    if (parts.length > 0) {
      if (amount > 0) parts.push(`${amount} ${unit.label}`);
      break;
    }
    if (amount > 0) parts.push(`${formatCount(amount)} ${unit.label}`);
  }
  return parts.length === 0 ? "0 s" : parts.join(" ");
}

const countUnits = ["k", "M", "B", "T"] as const;

/**
 * A count with an SI-like suffix and about three significant digits: "950", "12.5 k", "1.2 M",
 * "340 M". A value that rounds up to 1000 moves to the next unit ("1 M", never "1000 k").
 */
export function formatCompactCount(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  if (Math.abs(value) < 1000) return formatCount(Math.round(value));
  let scaled = value / 1000;
  let unit = 0;
  while (unit < countUnits.length - 1 && Math.abs(roundForDisplay(scaled)) >= 1000) {
    scaled /= 1000;
    unit++;
  }
  return `${trimZero(roundForDisplay(scaled))} ${countUnits[unit] ?? "T"}`;
}

/** One decimal below 100, none from 100 up: the precision a glance needs. */
function roundForDisplay(value: number): number {
  return Math.abs(value) >= 99.95 ? Math.round(value) : Math.round(value * 10) / 10;
}

function trimZero(value: number): string {
  return Number.isInteger(value) ? value.toFixed(0) : value.toFixed(1);
}

/** "14:03" in UTC, for axis ticks of a run shorter than a day. */
export function formatClock(ms: number): string {
  return new Date(ms).toISOString().slice(11, 16);
}

/** "14:03:07" in UTC, for axis ticks of a run of a few minutes. */
export function formatClockSeconds(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}

/** "11-21 14:03" in UTC, for axis ticks of a run that spans days. */
export function formatDayClock(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
}

/** "2026-11-21 14:03:07 UTC", for tooltips. */
export function formatInstant(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}
