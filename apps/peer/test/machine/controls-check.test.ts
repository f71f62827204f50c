import { describe, expect, it } from "vitest";
import { checkControls } from "../../src/doctor/controls-check.ts";
import { machineRules } from "../../src/machine/machine-rules.ts";
import type { MachineSensors } from "../../src/machine/machine-sensors.ts";

const sensors = (readings: Partial<Record<keyof MachineSensors, number | boolean>>): MachineSensors => ({
  onBattery: () => Promise.resolve(readings.onBattery as boolean | undefined),
  idleSeconds: () => Promise.resolve(readings.idleSeconds as number | undefined),
  othersCpuPercent: () => Promise.resolve(readings.othersCpuPercent as number | undefined),
  gpuTemperatureC: () => Promise.resolve(readings.gpuTemperatureC as number | undefined),
});

describe("doctor's controls check", () => {
  it("shows the rules in force and what the machine tells each now", async () => {
    const rules = machineRules({
      "max-use": "50%",
      "pause-on-battery": true,
      "gpu-max-temp": "80",
      schedule: "12:00-13:00",
    });
    const check = await checkControls(
      rules,
      sensors({ onBattery: false, gpuTemperatureC: 64 }),
      new Date(2026, 10, 2, 12, 30),
    );
    expect(check).toEqual({
      name: "controls",
      verdict: "ok",
      summary:
        "use at most 50 % of the time; pause on battery; train only 12:00-13:00; pause above 80 °C on the GPU, resume below 72 °C" +
        " · in the schedule now · on mains power now · GPU at 64 °C",
    });
  });

  it("warns about a rule whose reading the machine does not give", async () => {
    const rules = machineRules({ "idle-minutes": "10", "busy-above": "40" });
    const check = await checkControls(rules, sensors({ othersCpuPercent: 12 }), new Date());
    expect(check.verdict).toBe("warn");
    expect(check.summary).toContain("other programs use 12 % of the CPU");
    expect(check.summary).toContain("this machine does not tell when it was last used");
    expect(check.advice).toMatch(/hold nothing here/);
  });
});
