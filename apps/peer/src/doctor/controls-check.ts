import { describeRules, type MachineRules } from "../machine/machine-rules.ts";
import type { MachineSensors } from "../machine/machine-sensors.ts";
import { inSchedule } from "../machine/schedule.ts";

/** The doctor's check of the rules (a `DoctorCheck`). */
export interface ControlsCheck {
  readonly name: "controls";
  readonly verdict: "ok" | "warn";
  readonly summary: string;
  readonly advice?: string;
}

/**
 * The volunteer's rules in force, and what this machine tells each of them now: a rule whose
 * reading the machine does not give would hold nothing (a warning, with what to do).
 */
export async function checkControls(
  rules: MachineRules,
  sensors: MachineSensors,
  now: Date,
): Promise<ControlsCheck> {
  const readings: string[] = [];
  const blind: string[] = [];
  if (rules.schedule !== undefined) {
    readings.push(inSchedule(rules.schedule, now) ? "in the schedule now" : "outside the schedule now");
  }
  if (rules.pauseOnBattery) {
    const onBattery = await sensors.onBattery();
    if (onBattery === undefined) blind.push("whether it runs on battery");
    else readings.push(onBattery ? "on battery now" : "on mains power now");
  }
  if (rules.idleMinutes !== undefined) {
    const idle = await sensors.idleSeconds();
    if (idle === undefined) blind.push("when it was last used (no readable /dev/input)");
    else readings.push(`last input ${Math.round(idle)} s ago`);
  }
  if (rules.busyAbovePercent !== undefined) {
    // Two readings a moment apart: the share of the CPU others use in between.
    await sensors.othersCpuPercent();
    await new Promise((resolve) => setTimeout(resolve, 500));
    const others = await sensors.othersCpuPercent();
    if (others === undefined) blind.push("how busy its CPU is");
    else readings.push(`other programs use ${Math.round(others)} % of the CPU`);
  }
  if (rules.gpuTemperature !== undefined) {
    const celsius = await sensors.gpuTemperatureC();
    if (celsius === undefined) blind.push("its GPU's temperature (no nvidia-smi)");
    else readings.push(`GPU at ${celsius} °C`);
  }
  const summary = [describeRules(rules).join("; "), ...readings].join(" · ");
  if (blind.length === 0) return { name: "controls", verdict: "ok", summary };
  return {
    name: "controls",
    verdict: "warn",
    summary: `${summary} · this machine does not tell ${blind.join(", ")}`,
    advice: "those rules hold nothing here; see the peer's README for what each OS lets it read",
  };
}
