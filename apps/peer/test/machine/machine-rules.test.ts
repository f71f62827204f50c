import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  describeRules,
  machineRules,
  parseRate,
  readMachineConfig,
  threadEnvironment,
} from "../../src/machine/machine-rules.ts";

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

  it("reads traffic caps as people write them: bits, bytes with a capital B, or a bare number of Mbit/s", () => {
    expect(parseRate("2Mbit", "--max-upload")).toBe(250_000);
    expect(parseRate("2 Mbit/s", "--max-upload")).toBe(250_000);
    expect(parseRate("2Mb", "--max-upload")).toBe(250_000);
    expect(parseRate("2mbps", "--max-upload")).toBe(250_000);
    expect(parseRate("500kbit", "--max-upload")).toBe(62_500);
    expect(parseRate("1MB/s", "--max-upload")).toBe(1_000_000);
    expect(parseRate("250kB/s", "--max-upload")).toBe(250_000);
    expect(parseRate("1.5", "--max-upload")).toBe(187_500);
    expect(parseRate("1Gbit", "--max-upload")).toBe(125_000_000);
    for (const bad of ["", "fast", "-2Mbit", "2 Tbit", "10kbit", "0"]) {
      expect(() => parseRate(bad, "--max-download"), bad).toThrow(
        /--max-download must be a rate of at least 64 kbit\/s/,
      );
    }
    const rules = machineRules({ "max-upload": "2Mbit" }, { maxUpload: "9Mbit", maxDownload: 20 });
    expect(rules).toMatchObject({ maxUploadBytesPerSecond: 250_000, maxDownloadBytesPerSecond: 2_500_000 });
    expect(describeRules(rules).slice(1)).toEqual(["upload at most 2 Mbit/s", "download at most 20 Mbit/s"]);
  });

  it("caps native TensorFlow's compute threads", () => {
    const rules = machineRules({ threads: "2" }, { threads: 6 });
    expect(rules.threads).toBe(2);
    expect(machineRules({}, { threads: 1 }).threads).toBe(1);
    expect(describeRules(rules).slice(1)).toEqual(["compute on at most 2 threads"]);
    expect(threadEnvironment(2)).toEqual({ TF_NUM_INTRAOP_THREADS: "2", TF_NUM_INTEROP_THREADS: "1" });
    expect(() => machineRules({ threads: "1.5" })).toThrow(/--threads must be a whole number/);
    expect(() => machineRules({ threads: "0" })).toThrow(/--threads must be a number above 0/);
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
