import { readFile } from "node:fs/promises";
import { parseDutyCycle } from "@barnraise/volunteer";
import { z } from "zod";
import { parseSchedule, type Schedule } from "./schedule.ts";

/**
 * The volunteer's rules for this machine (issue: volunteers stay in control): how much of the time
 * it may compute, and when it must not train at all. Each comes from a flag or the config file
 * (`--config`, JSON with the same keys); a flag wins over the file. Unset rules are off.
 */
export interface MachineRules {
  /** The share of the time the peer may compute, in [0.1, 1] (`--max-use 50%`); 1 by default. */
  readonly maxUse: number;
  /** Train only after this many minutes without keyboard or mouse input (`--idle-minutes`). */
  readonly idleMinutes?: number;
  /** Pause while other programs use more than this % of the machine's CPU (`--busy-above`). */
  readonly busyAbovePercent?: number;
  /** Pause while the machine runs on battery (`--pause-on-battery`). */
  readonly pauseOnBattery: boolean;
  /** Train only in these hours (`--schedule "mon-fri 18:00-08:00"`). */
  readonly schedule?: Schedule;
  /** Pause above this GPU temperature and resume below `resumeBelowC` (`--gpu-max-temp 83`). */
  readonly gpuTemperature?: { readonly pauseAboveC: number; readonly resumeBelowC: number };
  /** At most this many bytes per second out of and into the machine (`--max-upload 2Mbit`). */
  readonly maxUploadBytesPerSecond?: number;
  readonly maxDownloadBytesPerSecond?: number;
  /** At most this many threads compute (`--threads 2`): native TensorFlow's thread pools. */
  readonly threads?: number;
}

/** Below the pause temperature, by default, before training resumes: the GPU must cool down first. */
export const GPU_COOLDOWN_C = 8;

/** The config file's keys: the flags' names in camelCase (every key optional). */
const configFileSchema = z.strictObject({
  maxUse: z.union([z.string(), z.number()]).optional(),
  idleMinutes: z
    .number()
    .positive()
    .max(24 * 60)
    .optional(),
  busyAbove: z.number().positive().max(100).optional(),
  pauseOnBattery: z.boolean().optional(),
  schedule: z.string().min(1).max(500).optional(),
  gpuMaxTemp: z.number().min(30).max(110).optional(),
  gpuResumeTemp: z.number().min(20).max(110).optional(),
  maxUpload: z.union([z.string(), z.number()]).optional(),
  threads: z.number().int().min(1).max(1024).optional(),
  maxDownload: z.union([z.string(), z.number()]).optional(),
});
export type MachineConfigFile = z.infer<typeof configFileSchema>;

/** The rule flags as `parseArgs` gives them (strings; the boolean as a boolean). */
export interface MachineRuleFlags {
  readonly "max-use"?: string | undefined;
  readonly "idle-minutes"?: string | undefined;
  readonly "busy-above"?: string | undefined;
  readonly "pause-on-battery"?: boolean | undefined;
  readonly schedule?: string | undefined;
  readonly "gpu-max-temp"?: string | undefined;
  readonly "gpu-resume-temp"?: string | undefined;
  readonly "max-upload"?: string | undefined;
  readonly threads?: string | undefined;
  readonly "max-download"?: string | undefined;
}

/** `parseArgs` options of the rule flags. */
export const machineRuleOptions = {
  config: { type: "string" },
  "max-use": { type: "string" },
  "idle-minutes": { type: "string" },
  "busy-above": { type: "string" },
  "pause-on-battery": { type: "boolean" },
  schedule: { type: "string" },
  "gpu-max-temp": { type: "string" },
  "gpu-resume-temp": { type: "string" },
  "max-upload": { type: "string" },
  threads: { type: "string" },
  "max-download": { type: "string" },
} as const;

/** Reads and checks the config file; RangeError saying which key is wrong and how. */
export async function readMachineConfig(path: string): Promise<MachineConfigFile> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new RangeError(`cannot read the config file ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new RangeError(`the config file ${path} is not JSON: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const parsed = configFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.join(".") ?? "";
    throw new RangeError(
      `the config file ${path}: ${where === "" ? "" : `${where}: `}${issue?.message ?? "invalid"}`,
    );
  }
  return parsed.data;
}

/** The rules of the flags and of `--config`'s file, when one is named (see `machineRules`). */
export async function readMachineRules(
  flags: MachineRuleFlags & { readonly config?: string | undefined },
): Promise<MachineRules> {
  return machineRules(flags, flags.config === undefined ? {} : await readMachineConfig(flags.config));
}

/** The rules from the flags over the config file; RangeError naming the flag or key that is wrong. */
export function machineRules(flags: MachineRuleFlags, file: MachineConfigFile = {}): MachineRules {
  const maxUse = flags["max-use"] ?? file.maxUse;
  const idleMinutes = number(flags["idle-minutes"], "--idle-minutes", 0, 24 * 60) ?? file.idleMinutes;
  const busyAbove = number(flags["busy-above"], "--busy-above", 0, 100) ?? file.busyAbove;
  const schedule = flags.schedule ?? file.schedule;
  const maxTemp = number(flags["gpu-max-temp"], "--gpu-max-temp", 30, 110) ?? file.gpuMaxTemp;
  const resumeTemp = number(flags["gpu-resume-temp"], "--gpu-resume-temp", 20, 110) ?? file.gpuResumeTemp;
  const upload = flags["max-upload"] ?? file.maxUpload;
  const threads = number(flags.threads, "--threads", 0, 1024) ?? file.threads;
  if (threads !== undefined && !Number.isInteger(threads)) {
    throw new RangeError(`--threads must be a whole number of threads, not ${threads}`);
  }
  const download = flags["max-download"] ?? file.maxDownload;
  if (resumeTemp !== undefined && maxTemp === undefined) {
    throw new RangeError("--gpu-resume-temp needs --gpu-max-temp");
  }
  if (maxTemp !== undefined && resumeTemp !== undefined && resumeTemp >= maxTemp) {
    throw new RangeError(`--gpu-resume-temp (${resumeTemp}) must be below --gpu-max-temp (${maxTemp})`);
  }
  return {
    maxUse: maxUse === undefined ? 1 : parseDutyCycle(String(maxUse)),
    pauseOnBattery: flags["pause-on-battery"] ?? file.pauseOnBattery ?? false,
    ...(idleMinutes === undefined ? {} : { idleMinutes }),
    ...(busyAbove === undefined ? {} : { busyAbovePercent: busyAbove }),
    ...(schedule === undefined ? {} : { schedule: parseSchedule(schedule) }),
    ...(maxTemp === undefined
      ? {}
      : { gpuTemperature: { pauseAboveC: maxTemp, resumeBelowC: resumeTemp ?? maxTemp - GPU_COOLDOWN_C } }),
    ...(threads === undefined ? {} : { threads }),
    ...(upload === undefined ? {} : { maxUploadBytesPerSecond: parseRate(String(upload), "--max-upload") }),
    ...(download === undefined
      ? {}
      : { maxDownloadBytesPerSecond: parseRate(String(download), "--max-download") }),
  };
}

/**
 * The environment that holds native TensorFlow (tfjs-node, tfjs-node-gpu) to `threads` compute
 * threads: its intra-op pool (one op over several threads) and one inter-op thread. TensorFlow
 * reads it when it loads, so it must be set before the backend is chosen. The wasm and cpu
 * backends compute on one thread anyway, and WebGPU on the GPU.
 */
export function threadEnvironment(threads: number): Record<string, string> {
  return { TF_NUM_INTRAOP_THREADS: String(threads), TF_NUM_INTEROP_THREADS: "1" };
}

/** The least traffic cap: below it a state download would take hours. */
export const MIN_RATE_BYTES_PER_SECOND = 64_000 / 8;

const PREFIXES: Readonly<Record<string, number>> = { k: 1e3, m: 1e6, g: 1e9 };

/**
 * A traffic cap as a volunteer writes it, in bytes per second: "2Mbit", "2 Mbit/s", "2Mb" and
 * "500kbit" are bits, "1MB/s" and "250kB/s" bytes (a capital B), and a bare number is Mbit/s (how
 * home links are sold). RangeError naming `flag` for anything else, or below 64 kbit/s.
 */
export function parseRate(text: string, flag: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*(?:([kKmMgG])(bit|b|B))?(?:\/s|ps)?$/.exec(text.trim());
  const prefix = PREFIXES[(match?.[2] ?? "m").toLowerCase()] ?? NaN;
  const perByte = match?.[3] === "B" ? 1 : 1 / 8;
  const bytes = match === null ? NaN : Number(match[1]) * prefix * perByte;
  if (!Number.isFinite(bytes) || bytes < MIN_RATE_BYTES_PER_SECOND) {
    throw new RangeError(
      `${flag} must be a rate of at least 64 kbit/s such as 2Mbit, 500kbit or 1MB/s, not ${JSON.stringify(text)}`,
    );
  }
  return bytes;
}

/** A rate for people: "2 Mbit/s", "500 kbit/s". */
export function formatRate(bytesPerSecond: number): string {
  const bits = bytesPerSecond * 8;
  if (bits >= 1e9) return `${Number((bits / 1e9).toPrecision(3))} Gbit/s`;
  if (bits >= 1e6) return `${Number((bits / 1e6).toPrecision(3))} Mbit/s`;
  return `${Number((bits / 1e3).toPrecision(3))} kbit/s`;
}

/** The rules in force, for the status line and `doctor` ("use at most 50 %, on battery: pause, …"). */
export function describeRules(rules: MachineRules): string[] {
  const lines = [`use at most ${Math.round(rules.maxUse * 100)} % of the time`];
  if (rules.idleMinutes !== undefined) lines.push(`train only after ${rules.idleMinutes} min without input`);
  if (rules.busyAbovePercent !== undefined) {
    lines.push(`pause while other programs use over ${rules.busyAbovePercent} % of the CPU`);
  }
  if (rules.pauseOnBattery) lines.push("pause on battery");
  if (rules.schedule !== undefined) lines.push(`train only ${rules.schedule.text}`);
  if (rules.gpuTemperature !== undefined) {
    const { pauseAboveC, resumeBelowC } = rules.gpuTemperature;
    lines.push(`pause above ${pauseAboveC} °C on the GPU, resume below ${resumeBelowC} °C`);
  }
  if (rules.threads !== undefined) {
    lines.push(`compute on at most ${rules.threads} thread${rules.threads === 1 ? "" : "s"}`);
  }
  if (rules.maxUploadBytesPerSecond !== undefined) {
    lines.push(`upload at most ${formatRate(rules.maxUploadBytesPerSecond)}`);
  }
  if (rules.maxDownloadBytesPerSecond !== undefined) {
    lines.push(`download at most ${formatRate(rules.maxDownloadBytesPerSecond)}`);
  }
  return lines;
}

function number(text: string | undefined, flag: string, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text.trim().replace(/%$/, ""));
  if (text.trim() === "" || !Number.isFinite(value) || value <= min || value > max) {
    throw new RangeError(
      `${flag} must be a number above ${min} and at most ${max}, not ${JSON.stringify(text)}`,
    );
  }
  return value;
}
