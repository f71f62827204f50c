import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { describeRules, machineRules, readMachineConfig } from "../../src/machine/machine-rules.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-rules-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the volunteer's rules for the machine", () => {
  it("are all off by default: the whole machine, any time", () => {
    expect(machineRules({})).toEqual({ maxUse: 1, pauseOnBattery: false });
    expect(describeRules(machineRules({}))).toEqual(["use at most 100 % of the time"]);
  });

  it("come from the flags, over the config file's keys", async () => {
    const path = join(dir, "peer.json");
    await writeFile(
      path,
      JSON.stringify({
        maxUse: "50%",
        idleMinutes: 5,
        pauseOnBattery: true,
        schedule: "sat,sun 00:00-24:00",
        gpuMaxTemp: 80,
      }),
    );
    const rules = machineRules({ "max-use": "30%", "busy-above": "25" }, await readMachineConfig(path));
    expect(rules).toMatchObject({
      maxUse: 0.3,
      idleMinutes: 5,
      busyAbovePercent: 25,
      pauseOnBattery: true,
      gpuTemperature: { pauseAboveC: 80, resumeBelowC: 72 },
    });
    expect(rules.schedule?.text).toBe("sat,sun 00:00-24:00");
    expect(describeRules(rules)).toEqual([
      "use at most 30 % of the time",
      "train only after 5 min without input",
      "pause while other programs use over 25 % of the CPU",
      "pause on battery",
      "train only sat,sun 00:00-24:00",
      "pause above 80 °C on the GPU, resume below 72 °C",
    ]);
  });

  it("refuses values that make no sense, naming the flag or key", async () => {
    expect(() => machineRules({ "max-use": "5%" })).toThrow(/between 10 % and 100 %/);
    expect(() => machineRules({ "max-use": "lots" })).toThrow(/percentage such as 50%/);
    expect(() => machineRules({ "busy-above": "150" })).toThrow(/--busy-above must be a number/);
    expect(() => machineRules({ "gpu-resume-temp": "70" })).toThrow(/needs --gpu-max-temp/);
    expect(() => machineRules({ "gpu-max-temp": "70", "gpu-resume-temp": "75" })).toThrow(/must be below/);
    const path = join(dir, "bad.json");
    await writeFile(path, JSON.stringify({ idleMinutes: -1 }));
    await expect(readMachineConfig(path)).rejects.toThrow(/bad.json: idleMinutes/);
    await writeFile(path, JSON.stringify({ maxuse: "50%" }));
    await expect(readMachineConfig(path)).rejects.toThrow(/bad.json/);
    await writeFile(path, "{ not json");
    await expect(readMachineConfig(path)).rejects.toThrow(/is not JSON/);
    await expect(readMachineConfig(join(dir, "missing.json"))).rejects.toThrow(/cannot read the config file/);
  });
});
