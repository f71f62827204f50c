import {
  PAUSE_REASON_TEXT,
  type LogLevel,
  type PauseReason,
  type VolunteerControls,
} from "@barnraise/volunteer";
import type { MachineRules } from "./machine-rules.ts";
import type { MachineSensors } from "./machine-sensors.ts";
import { inSchedule } from "./schedule.ts";

/** How often the rules look at the machine: a rule takes hold within this (and a minibatch). */
export const MACHINE_CHECK_MS = 2_000;

export interface MachineWatchOptions {
  readonly rules: MachineRules;
  readonly sensors: MachineSensors;
  /** The run's controls: each rule holds or releases its reason there. */
  readonly controls: VolunteerControls;
  readonly log: (level: LogLevel, message: string, fields?: Readonly<Record<string, unknown>>) => void;
  readonly now?: () => Date;
  readonly intervalMs?: number;
}

/**
 * Keeps the volunteer's rules for this machine (`MachineRules`): every couple of seconds it reads
 * the sensors and holds training for each rule that says so (on battery, outside the schedule,
 * someone at the keyboard, other programs busy, the GPU too hot), releasing it when the reason is
 * gone; the run then pauses after the minibatch in flight, or goes on. A rule whose reading this
 * machine does not give holds nothing, and says so once.
 */
export class MachineWatch {
  readonly #options: MachineWatchOptions;
  readonly #warned = new Set<PauseReason>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  constructor(options: MachineWatchOptions) {
    this.#options = options;
  }

  /** Whether any rule needs a reading (a schedule alone, or the use limit, needs none). */
  get watches(): boolean {
    const { rules } = this.#options;
    return (
      rules.pauseOnBattery ||
      rules.idleMinutes !== undefined ||
      rules.busyAbovePercent !== undefined ||
      rules.schedule !== undefined ||
      rules.gpuTemperature !== undefined
    );
  }

  /** Checks now, then every interval until `stop`. */
  start(): void {
    if (!this.watches) return;
    const loop = async () => {
      await this.check();
      if (this.#stopped) return;
      this.#timer = setTimeout(() => void loop(), this.#options.intervalMs ?? MACHINE_CHECK_MS);
    };
    void loop();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  /** One look at the machine: each rule holds or releases its reason. */
  async check(): Promise<void> {
    const { rules, sensors } = this.#options;
    const now = (this.#options.now ?? (() => new Date()))();
    if (rules.schedule !== undefined) this.#set("schedule", !inSchedule(rules.schedule, now));
    if (rules.pauseOnBattery) {
      this.#reading(
        "battery",
        await sensors.onBattery(),
        (onBattery) => onBattery,
        "whether it runs on battery",
      );
    }
    if (rules.idleMinutes !== undefined) {
      const idleMinutes = rules.idleMinutes;
      this.#reading(
        "in-use",
        await sensors.idleSeconds(),
        (idle) => idle < idleMinutes * 60,
        "when it was last used (no readable /dev/input)",
      );
    }
    if (rules.busyAbovePercent !== undefined) {
      const limit = rules.busyAbovePercent;
      const others = await sensors.othersCpuPercent();
      // No reading yet (the first one measures from here): keep what holds.
      if (others !== undefined) this.#set("busy", others > limit, { othersCpuPercent: Math.round(others) });
    }
    if (rules.gpuTemperature !== undefined) {
      const { pauseAboveC, resumeBelowC } = rules.gpuTemperature;
      const hot = this.#options.controls.reasons.includes("too-hot");
      this.#reading(
        "too-hot",
        await sensors.gpuTemperatureC(),
        (celsius) => (hot ? celsius >= resumeBelowC : celsius > pauseAboveC),
        "its GPU's temperature (no nvidia-smi)",
        (celsius) => ({ gpuTemperatureC: celsius }),
      );
    }
  }

  #reading<T>(
    reason: PauseReason,
    value: T | undefined,
    holds: (value: T) => boolean,
    unseen: string,
    fields?: (value: T) => Readonly<Record<string, unknown>>,
  ): void {
    if (value === undefined) {
      if (!this.#warned.has(reason)) {
        this.#warned.add(reason);
        this.#options.log(
          "warn",
          `this machine does not tell ${unseen}: the "${PAUSE_REASON_TEXT[reason]}" rule is off`,
        );
      }
      this.#set(reason, false);
      return;
    }
    this.#set(reason, holds(value), fields?.(value));
  }

  #set(reason: PauseReason, held: boolean, fields: Readonly<Record<string, unknown>> = {}): void {
    const { controls } = this.#options;
    if (controls.reasons.includes(reason) === held) return;
    controls.set(reason, held);
    this.#options.log(
      "info",
      held ? `pausing: ${PAUSE_REASON_TEXT[reason]}` : `the "${PAUSE_REASON_TEXT[reason]}" pause is over`,
      { reason, ...fields },
    );
  }
}
