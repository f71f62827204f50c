import { describe, expect, it } from "vitest";
import { MIN_DUTY_CYCLE, parseDutyCycle, VolunteerControls } from "../../src/training/volunteer-controls.ts";

describe("VolunteerControls", () => {
  it("tells its listeners of each change, once, and not after they unsubscribe", () => {
    const controls = new VolunteerControls({ paused: true, dutyCycle: 0.5 });
    expect([controls.paused, controls.dutyCycle]).toEqual([true, 0.5]);
    const seen: [boolean, number][] = [];
    const stop = controls.onChange(() => seen.push([controls.paused, controls.dutyCycle]));
    controls.resume();
    controls.resume();
    controls.setDutyCycle(0.25);
    controls.pause();
    stop();
    controls.resume();
    expect(seen).toEqual([
      [false, 0.5],
      [false, 0.25],
      [true, 0.25],
    ]);
  });

  it("refuses a use limit outside [10 %, 100 %] and keeps the one it had", () => {
    const controls = new VolunteerControls();
    expect(controls.dutyCycle).toBe(1);
    for (const share of [0, MIN_DUTY_CYCLE / 2, 1.5, Number.NaN]) {
      expect(() => {
        controls.setDutyCycle(share);
      }).toThrow(RangeError);
    }
    expect(controls.dutyCycle).toBe(1);
    expect(() => new VolunteerControls({ dutyCycle: 0 })).toThrow(/between 10 % and 100 %/);
  });

  it("holds training while any reason holds it, and says which", () => {
    const controls = new VolunteerControls();
    let changes = 0;
    controls.onChange(() => (changes += 1));
    controls.hold("battery");
    controls.hold("battery");
    controls.set("schedule", true);
    expect(controls.reasons).toEqual(["battery", "schedule"]);
    controls.release("battery");
    expect(controls.paused).toBe(true);
    controls.set("schedule", false);
    controls.release("schedule");
    expect([controls.paused, controls.reasons]).toEqual([false, []]);
    expect(changes).toBe(4);
  });

  it("reads a use limit as a volunteer writes it", () => {
    expect(parseDutyCycle("50%")).toBe(0.5);
    expect(parseDutyCycle(" 30 % ")).toBe(0.3);
    expect(parseDutyCycle("0.25")).toBe(0.25);
    expect(parseDutyCycle("75")).toBe(0.75);
    expect(() => parseDutyCycle("5%")).toThrow(/between 10 % and 100 %/);
    expect(() => parseDutyCycle("half")).toThrow(/percentage such as 50%/);
    expect(() => parseDutyCycle("")).toThrow(/percentage such as 50%/);
  });
});
