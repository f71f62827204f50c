import { execFile } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

/**
 * What the machine rules read of the machine, each behind a small interface (tests give fakes).
 * Every reading may be `undefined`: this machine does not tell (no battery interface, no input
 * devices the peer may see, no GPU tool); the rule then does not hold training, and says once why.
 *
 * What each OS tells, as implemented here (Linux only; elsewhere every reading is undefined):
 * - power: /sys/class/power_supply (a `Mains`/`USB` supply online, or a `Battery` discharging).
 *   macOS has `pmset -g batt` and Windows `GetSystemPowerStatus`; not read yet.
 * - input: the newest access time of /dev/input/event* (the devices' reads by the display server
 *   touch them), which needs read access to /dev/input (the `input` group on most distributions).
 *   Over SSH or in a container there is none. logind's IdleHint is not read.
 * - CPU: /proc/stat (all CPUs' busy time) and /proc/self/stat (this process's), so that the peer's
 *   own work is not counted as others'.
 * - GPU: `nvidia-smi --query-gpu=temperature.gpu,power.draw` where it is on PATH (NVIDIA only;
 *   AMD's `rocm-smi` and Apple's GPUs are not read).
 */
export interface MachineSensors {
  /** Whether the machine runs on battery now. */
  onBattery(): Promise<boolean | undefined>;
  /** Seconds since the last keyboard or mouse input. */
  idleSeconds(): Promise<number | undefined>;
  /** The share (%) of the machine's CPU time other processes used since the last call. */
  othersCpuPercent(): Promise<number | undefined>;
  /** The hottest GPU's temperature, °C. */
  gpuTemperatureC(): Promise<number | undefined>;
}

export interface LinuxSensorPaths {
  readonly powerSupply?: string;
  readonly input?: string;
  readonly procStat?: string;
  readonly selfStat?: string;
  /** The `nvidia-smi` program (a name on PATH, or a path). */
  readonly nvidiaSmi?: string;
}

/** The sensors of a Linux machine (undefined readings elsewhere), at the standard paths unless told. */
export function linuxSensors(paths: LinuxSensorPaths = {}): MachineSensors {
  const linux = process.platform === "linux";
  const cpu = cpuMeter(paths.procStat ?? "/proc/stat", paths.selfStat ?? "/proc/self/stat");
  return {
    onBattery: () => (linux ? readOnBattery(paths.powerSupply ?? "/sys/class/power_supply") : none()),
    idleSeconds: () => (linux ? readIdleSeconds(paths.input ?? "/dev/input") : none()),
    othersCpuPercent: () => (linux ? cpu() : none()),
    gpuTemperatureC: () => readNvidiaTemperature(paths.nvidiaSmi ?? "nvidia-smi"),
  };
}

const none = () => Promise.resolve(undefined);

/** On battery: a battery discharging and no mains (or USB) supply online; undefined when unreadable. */
export async function readOnBattery(directory: string): Promise<boolean | undefined> {
  let names: string[];
  try {
    names = await readdir(directory);
  } catch {
    return undefined;
  }
  let mainsOnline = false;
  let discharging = false;
  for (const name of names) {
    const type = await readText(join(directory, name, "type"));
    if (type === "Mains" || type === "USB") {
      if ((await readText(join(directory, name, "online"))) === "1") mainsOnline = true;
    } else if (type === "Battery") {
      if ((await readText(join(directory, name, "status"))) === "Discharging") discharging = true;
    }
  }
  return discharging && !mainsOnline;
}

/** Seconds since the newest access to an input event device; undefined when none can be seen. */
export async function readIdleSeconds(directory: string, now = Date.now()): Promise<number | undefined> {
  let names: string[];
  try {
    names = (await readdir(directory)).filter((name) => name.startsWith("event") || name === "mice");
  } catch {
    return undefined;
  }
  let newest: number | undefined;
  for (const name of names) {
    try {
      const info = await stat(join(directory, name));
      const touched = Math.max(info.atimeMs, info.mtimeMs);
      newest = newest === undefined ? touched : Math.max(newest, touched);
    } catch {
      // A device that went away (unplugged) says nothing.
    }
  }
  return newest === undefined ? undefined : Math.max(0, (now - newest) / 1000);
}

/**
 * The share of all CPUs' time that other processes used between two calls: the machine's busy
 * time (/proc/stat) less this process's (/proc/self/stat), over the machine's total. The first
 * call measures from the peer's start.
 */
export function cpuMeter(procStat: string, selfStat: string): () => Promise<number | undefined> {
  let last: { total: number; busy: number; self: number } | undefined;
  return async () => {
    const machine = await readText(procStat);
    const own = await readText(selfStat);
    const cpu = machine?.split("\n")[0];
    if (cpu?.startsWith("cpu ") !== true || own === undefined) return undefined;
    const fields = cpu.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = fields;
    const total = user + nice + system + idle + iowait + irq + softirq + steal;
    const busy = total - idle - iowait;
    // The command may contain spaces: the fields after its closing parenthesis; utime and stime
    // are fields 14 and 15, the 12th and 13th after it.
    const after = own.slice(own.lastIndexOf(")") + 2).split(" ");
    const self = Number(after[11]) + Number(after[12]);
    if (!Number.isFinite(total) || !Number.isFinite(self)) return undefined;
    const previous = last;
    last = { total, busy, self };
    if (previous === undefined || total <= previous.total) return undefined;
    const others = busy - previous.busy - (self - previous.self);
    return Math.min(100, Math.max(0, (others / (total - previous.total)) * 100));
  };
}

const run = promisify(execFile);

/** The hottest GPU by `nvidia-smi`; undefined without the tool or a reading. */
export async function readNvidiaTemperature(program: string): Promise<number | undefined> {
  try {
    const { stdout } = await run(
      program,
      ["--query-gpu=temperature.gpu,power.draw", "--format=csv,noheader,nounits"],
      { timeout: 5_000 },
    );
    const temperatures = stdout
      .split("\n")
      .map((line) => Number(line.split(",")[0]?.trim()))
      .filter((value) => Number.isFinite(value) && value > 0);
    return temperatures.length === 0 ? undefined : Math.max(...temperatures);
  } catch {
    return undefined;
  }
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return (await readFile(path, "utf8")).trim();
  } catch {
    return undefined;
  }
}
