import { chmod, mkdir, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cpuMeter,
  linuxSensors,
  readIdleSeconds,
  readNvidiaTemperature,
  readOnBattery,
} from "../../src/machine/machine-sensors.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-sensors-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A fake /sys/class/power_supply with the given supplies. */
async function powerSupply(name: string, supplies: Record<string, Record<string, string>>): Promise<string> {
  const root = join(dir, name);
  for (const [supply, files] of Object.entries(supplies)) {
    await mkdir(join(root, supply), { recursive: true });
    for (const [file, text] of Object.entries(files)) await writeFile(join(root, supply, file), `${text}\n`);
  }
  await mkdir(root, { recursive: true });
  return root;
}

describe("what the machine rules read of a Linux machine", () => {
  it("is on battery when a battery discharges and no mains supply is online", async () => {
    const unplugged = await powerSupply("unplugged", {
      AC: { type: "Mains", online: "0" },
      BAT0: { type: "Battery", status: "Discharging" },
    });
    expect(await readOnBattery(unplugged)).toBe(true);
    const plugged = await powerSupply("plugged", {
      AC: { type: "Mains", online: "1" },
      BAT0: { type: "Battery", status: "Charging" },
    });
    expect(await readOnBattery(plugged)).toBe(false);
    // A desktop: no battery at all.
    expect(await readOnBattery(await powerSupply("desktop", {}))).toBe(false);
    expect(await readOnBattery(join(dir, "no-such-dir"))).toBeUndefined();
  });

  it("tells the time since the newest input event, and nothing without input devices", async () => {
    const input = join(dir, "input");
    await mkdir(input, { recursive: true });
    const now = Date.now();
    for (const [name, secondsAgo] of [
      ["event0", 600],
      ["event3", 90],
      ["js0", 1],
    ] as const) {
      await writeFile(join(input, name), "");
      const time = new Date(now - secondsAgo * 1000);
      await utimes(join(input, name), time, time);
    }
    // The joystick is no keyboard or mouse: the newest event device counts.
    expect(await readIdleSeconds(input, now)).toBeCloseTo(90, 0);
    expect(await readIdleSeconds(join(dir, "no-input"), now)).toBeUndefined();
  });

  it("counts other processes' CPU time, not the peer's own", async () => {
    const procStat = join(dir, "stat");
    const selfStat = join(dir, "self-stat");
    const write = async (busy: number, idle: number, self: number) => {
      await writeFile(procStat, `cpu  ${busy} 0 0 ${idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n`);
      // The command has spaces and parentheses; utime and stime are the 14th and 15th fields.
      await writeFile(selfStat, `42 (node (peer) x) S 1 42 42 0 -1 4194560 1 0 0 0 ${self} 0 0 0 20 0\n`);
    };
    const measure = cpuMeter(procStat, selfStat);
    await write(1000, 1000, 100);
    expect(await measure()).toBeUndefined();
    // 1000 ticks pass: 600 busy, of which 400 are the peer's own: others used 20 %.
    await write(1600, 1400, 500);
    expect(await measure()).toBeCloseTo(20, 5);
    expect(await cpuMeter(join(dir, "none"), selfStat)()).toBeUndefined();
  });

  it("reads the hottest GPU from nvidia-smi, and nothing without it", async () => {
    const fake = join(dir, "nvidia-smi");
    await writeFile(fake, "#!/bin/sh\necho '61, 250.3'\necho '84, 301.0'\n");
    await chmod(fake, 0o755);
    expect(await readNvidiaTemperature(fake)).toBe(84);
    expect(await readNvidiaTemperature(join(dir, "no-nvidia-smi"))).toBeUndefined();
  });

  it("reads this machine's own sensors without failing", async () => {
    const sensors = linuxSensors();
    // Whatever this machine has: a boolean or no answer, never a throw.
    expect([true, false, undefined]).toContain(await sensors.onBattery());
    const first = await sensors.othersCpuPercent();
    const second = await sensors.othersCpuPercent();
    if (process.platform === "linux") {
      expect(first).toBeUndefined();
      // /proc is there on Linux: a share once two readings are apart in time (or none when no tick passed).
      if (second !== undefined) expect(second).toBeGreaterThanOrEqual(0);
    }
  });
});
