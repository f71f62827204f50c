import { describe, expect, it } from "vitest";
import { inSchedule, parseSchedule } from "../../src/machine/schedule.ts";

/** A local time on a day of the week of November 2026 (the 1st was a Sunday). */
const at = (day: "sun" | "mon" | "fri" | "sat", hhmm: string) => {
  const date = { sun: 1, mon: 2, fri: 6, sat: 7 }[day];
  const [hours, minutes] = hhmm.split(":").map(Number);
  return new Date(2026, 10, date, hours, minutes);
};

describe("the training schedule", () => {
  it("trains in a window of the listed days, and past midnight into the next day", () => {
    const evenings = parseSchedule("mon-fri 18:00-08:00");
    expect(inSchedule(evenings, at("mon", "18:00"))).toBe(true);
    expect(inSchedule(evenings, at("mon", "17:59"))).toBe(false);
    expect(inSchedule(evenings, at("mon", "12:00"))).toBe(false);
    // Friday night runs into Saturday morning, but Saturday evening is not a window.
    expect(inSchedule(evenings, at("sat", "07:59"))).toBe(true);
    expect(inSchedule(evenings, at("sat", "08:00"))).toBe(false);
    expect(inSchedule(evenings, at("sat", "20:00"))).toBe(false);
    // Monday morning belongs to Sunday night, which is not listed.
    expect(inSchedule(evenings, at("mon", "03:00"))).toBe(false);
  });

  it("takes several windows, whole days and windows without days", () => {
    const schedule = parseSchedule("mon-fri 18:00-08:00; sat,sun 00:00-24:00");
    expect(inSchedule(schedule, at("sun", "12:00"))).toBe(true);
    expect(inSchedule(schedule, at("sun", "23:59"))).toBe(true);
    // The weekend ends at midnight; Monday's evening window starts at 18:00.
    expect(inSchedule(schedule, at("mon", "03:00"))).toBe(false);
    expect(inSchedule(schedule, at("fri", "12:00"))).toBe(false);
    const lunch = parseSchedule("12:00-13:30");
    expect(inSchedule(lunch, at("sat", "13:00"))).toBe(true);
    expect(inSchedule(lunch, at("sat", "13:30"))).toBe(false);
    // A range of days may wrap around the week.
    expect(inSchedule(parseSchedule("fri-mon 00:00-24:00"), at("sun", "09:00"))).toBe(true);
  });

  it("says what is wrong with a schedule it cannot read", () => {
    expect(() => parseSchedule("")).toThrow(/has no window/);
    expect(() => parseSchedule("weekdays 18:00-08:00")).toThrow(/unknown day "weekdays"/);
    expect(() => parseSchedule("mon 18:00")).toThrow(/is not "DAYS HH:MM-HH:MM"/);
    expect(() => parseSchedule("mon 25:00-26:00")).toThrow(/outside 00:00-24:00/);
    expect(() => parseSchedule("mon 10:75-11:00")).toThrow(/outside 00:00-24:00/);
  });
});
