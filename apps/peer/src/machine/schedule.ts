/**
 * When a volunteer lets the machine train: windows of the week in local time, written as
 * `mon-fri 18:00-08:00; sat,sun 00:00-24:00`. A window whose end is before its start runs past
 * midnight into the next day (so `mon-fri 18:00-08:00` includes Saturday 07:00); a window without
 * days is every day; `00:00-24:00` is the whole day.
 */
export interface Schedule {
  /** As the volunteer wrote it, for messages. */
  readonly text: string;
  readonly windows: readonly ScheduleWindow[];
}

export interface ScheduleWindow {
  /** Days the window starts on: 0 Sunday … 6 Saturday. */
  readonly days: ReadonlySet<number>;
  /** Minutes after midnight; `end` may be ≤ `start` (past midnight) and is at most 1440. */
  readonly start: number;
  readonly end: number;
}

const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;

/** Parses a schedule; RangeError saying which part is wrong. */
export function parseSchedule(text: string): Schedule {
  const windows = text
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part !== "")
    .map((part) => parseWindow(part, text));
  if (windows.length === 0) throw new RangeError(`--schedule ${JSON.stringify(text)} has no window`);
  return { text: text.trim(), windows };
}

/** Whether `date` (local time) falls in one of the schedule's windows. */
export function inSchedule(schedule: Schedule, date: Date): boolean {
  const day = date.getDay();
  const minute = date.getHours() * 60 + date.getMinutes();
  const yesterday = (day + 6) % 7;
  return schedule.windows.some(({ days, start, end }) => {
    if (start < end) return days.has(day) && minute >= start && minute < end;
    // Past midnight (or the whole day when start === end).
    return (days.has(day) && minute >= start) || (days.has(yesterday) && minute < end);
  });
}

function parseWindow(part: string, whole: string): ScheduleWindow {
  const match = /^(?:([a-z,\- ]+?)\s+)?(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})$/i.exec(part);
  if (match === null) {
    throw new RangeError(
      `--schedule ${JSON.stringify(whole)}: "${part}" is not "DAYS HH:MM-HH:MM" (for example "mon-fri 18:00-08:00")`,
    );
  }
  const [, dayText, startHours, startMinutes, endHours, endMinutes] = match;
  const start = minutes(startHours, startMinutes, part, false);
  const end = minutes(endHours, endMinutes, part, true);
  return {
    days: dayText === undefined ? new Set([0, 1, 2, 3, 4, 5, 6]) : parseDays(dayText, part),
    start,
    end,
  };
}

function parseDays(text: string, part: string): Set<number> {
  const days = new Set<number>();
  for (const item of text.split(",").map((entry) => entry.trim().toLowerCase())) {
    const [from, to] = item.split("-").map((name) => name.trim());
    const first = dayIndex(from, part);
    const last = to === undefined ? first : dayIndex(to, part);
    for (let day = first; ; day = (day + 1) % 7) {
      days.add(day);
      if (day === last) break;
    }
  }
  return days;
}

function dayIndex(name: string | undefined, part: string): number {
  const index = DAYS.indexOf((name ?? "").slice(0, 3) as (typeof DAYS)[number]);
  if (index < 0)
    throw new RangeError(`--schedule: "${part}" names an unknown day "${name ?? ""}" (mon … sun)`);
  return index;
}

function minutes(hours: string | undefined, mins: string | undefined, part: string, isEnd: boolean): number {
  const value = Number(hours) * 60 + Number(mins);
  const limit = isEnd ? 24 * 60 : 24 * 60 - 1;
  if (Number(mins) > 59 || value > limit) {
    throw new RangeError(`--schedule: "${part}" has a time outside 00:00-24:00`);
  }
  return value;
}
