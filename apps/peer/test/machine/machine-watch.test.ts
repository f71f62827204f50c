import { VolunteerControls, type LogLevel } from "@barnraise/volunteer";
import { describe, expect, it } from "vitest";
import { machineRules } from "../../src/machine/machine-rules.ts";
import type { MachineSensors } from "../../src/machine/machine-sensors.ts";
import { MachineWatch } from "../../src/machine/machine-watch.ts";

/** Sensors whose readings the test sets. */
function fakeSensors() {
  const readings: {
    onBattery?: boolean;
    idleSeconds?: number;
    othersCpuPercent?: number;
    gpuTemperatureC?: number;
  } = {};
  const sensors: MachineSensors = {
    onBattery: () => Promise.resolve(readings.onBattery),
    idleSeconds: () => Promise.resolve(readings.idleSeconds),
    othersCpuPercent: () => Promise.resolve(readings.othersCpuPercent),
    gpuTemperatureC: () => Promise.resolve(readings.gpuTemperatureC),
  };
  return { readings, sensors };
}

function setUp(flags: Parameters<typeof machineRules>[0], now = new Date(2026, 10, 2, 12, 0)) {
  const { readings, sensors } = fakeSensors();
  const controls = new VolunteerControls();
  const lines: { level: LogLevel; message: string }[] = [];
  const clock = { now };
  const watch = new MachineWatch({
    rules: machineRules(flags),
    sensors,
    controls,
    log: (level, message) => lines.push({ level, message }),
    now: () => clock.now,
  });
  return { readings, controls, lines, watch, clock };
}

describe("the machine watch", () => {
  it("pauses on battery and resumes on mains, saying so", async () => {
    const { readings, controls, lines, watch } = setUp({ "pause-on-battery": true });
    readings.onBattery = false;
    await watch.check();
    expect(controls.paused).toBe(false);
    readings.onBattery = true;
    await watch.check();
    expect(controls.reasons).toEqual(["battery"]);
    readings.onBattery = false;
    await watch.check();
    expect(controls.paused).toBe(false);
    expect(lines.map((line) => line.message)).toEqual([
      "pausing: on battery",
      'the "on battery" pause is over',
    ]);
  });

  it("trains only after the idle time, and pauses as soon as someone uses the machine", async () => {
    const { readings, controls, watch } = setUp({ "idle-minutes": "5" });
    readings.idleSeconds = 30;
    await watch.check();
    expect(controls.reasons).toEqual(["in-use"]);
    readings.idleSeconds = 301;
    await watch.check();
    expect(controls.paused).toBe(false);
    readings.idleSeconds = 2;
    await watch.check();
    expect(controls.reasons).toEqual(["in-use"]);
  });

  it("pauses while other programs keep the CPU busy, and keeps its state while it cannot tell yet", async () => {
    const { readings, controls, watch } = setUp({ "busy-above": "50" });
    await watch.check();
    expect(controls.paused).toBe(false);
    readings.othersCpuPercent = 80;
    await watch.check();
    expect(controls.reasons).toEqual(["busy"]);
    readings.othersCpuPercent = undefined;
    await watch.check();
    expect(controls.reasons).toEqual(["busy"]);
    readings.othersCpuPercent = 10;
    await watch.check();
    expect(controls.paused).toBe(false);
  });

  it("pauses a hot GPU until it has cooled below the lower limit", async () => {
    const { readings, controls, watch } = setUp({ "gpu-max-temp": "83", "gpu-resume-temp": "75" });
    for (const [celsius, held] of [
      [80, false],
      [84, true],
      [80, true],
      [75, true],
      [74, false],
      [83, false],
    ] as const) {
      readings.gpuTemperatureC = celsius;
      await watch.check();
      expect(controls.reasons.includes("too-hot"), `${celsius} °C`).toBe(held);
    }
  });

  it("follows the schedule, and holds for every reason at once", async () => {
    const { readings, controls, watch, clock } = setUp({
      schedule: "sat,sun 00:00-24:00",
      "pause-on-battery": true,
    });
    readings.onBattery = true;
    await watch.check();
    expect(controls.reasons).toEqual(["schedule", "battery"]);
    clock.now = new Date(2026, 10, 7, 9, 0); // a Saturday
    await watch.check();
    expect(controls.reasons).toEqual(["battery"]);
  });

  it("says once when the machine does not tell what a rule needs, and holds nothing for it", async () => {
    const { controls, lines, watch } = setUp({ "pause-on-battery": true, "gpu-max-temp": "80" });
    await watch.check();
    await watch.check();
    expect(controls.paused).toBe(false);
    expect(lines.filter((line) => line.level === "warn").map((line) => line.message)).toEqual([
      'this machine does not tell whether it runs on battery: the "on battery" rule is off',
      `this machine does not tell its GPU's temperature (no nvidia-smi): the "too hot" rule is off`,
    ]);
  });

  it("watches nothing when no rule needs a reading", () => {
    expect(setUp({ "max-use": "50%" }).watch.watches).toBe(false);
    expect(setUp({ schedule: "12:00-13:00" }).watch.watches).toBe(true);
  });
});
