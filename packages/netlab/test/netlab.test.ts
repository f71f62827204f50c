/**
 * Real namespaces, bridges and tc qdiscs: needs root, like CI. When the machine cannot run a lab the
 * tests fail with the reason (they never skip).
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NetLab, NetLabError, netemAvailable, netlabAvailable, waitForExit } from "../src/index.ts";
import { connectRoundTripMs, probe, startProbeServer } from "./support/tcp-probe.ts";

const run = promisify(execFile);

async function namespacesStartingWith(prefix: string): Promise<string[]> {
  const { stdout } = await run("ip", ["netns", "list"]);
  return stdout
    .split("\n")
    .map((line) => line.split(" ")[0] ?? "")
    .filter((name) => name.startsWith(prefix));
}

/** True while the process runs (a zombie, killed but not yet reaped by init, counts as ended). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) Z /.test(stat);
  } catch {
    return false;
  }
}

beforeAll(async () => {
  const available = await netlabAvailable();
  if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
});

describe("a lab with two subnets and a relay on both", () => {
  let lab: NetLab;
  beforeAll(async () => {
    lab = await NetLab.create();
  });
  afterAll(async () => {
    await lab.destroy();
  });

  it("lets two hosts on one subnet talk over TCP", async () => {
    const [a, b] = await Promise.all([lab.addHost({ name: "a" }), lab.addHost({ name: "b" })]);
    expect(a.address).not.toBe(b.address);
    await Promise.all([startProbeServer(a), startProbeServer(b)]);
    const [ab, ba] = await Promise.all([probe(a, b.address), probe(b, a.address)]);
    expect(ab).toEqual({ ok: true, reply: "b" });
    expect(ba).toEqual({ ok: true, reply: "a" });
    expect(await probe(a, "127.0.0.1")).toEqual({ ok: true, reply: "a" }); // loopback is up
  });

  it("keeps hosts on different subnets apart, while both reach the relay", async () => {
    const [east, west, relay] = await Promise.all([
      lab.addHost({ name: "east", subnet: "east" }),
      lab.addHost({ name: "west", subnet: "west" }),
      lab.addRouter({ name: "relay", subnets: ["east", "west"] }),
    ]);
    await Promise.all([startProbeServer(west), startProbeServer(relay)]);

    expect(await probe(east, relay.addressOn("east"))).toEqual({ ok: true, reply: "relay" });
    expect(await probe(west, relay.addressOn("west"))).toEqual({ ok: true, reply: "relay" });
    expect((await probe(east, west.address)).ok).toBe(false);
    // Even with routes onto each other's subnet, the bridges are separate: nobody answers.
    await east.exec("ip", ["route", "add", `${west.address}/32`, "dev", "eth0"]);
    await west.exec("ip", ["route", "add", `${east.address}/32`, "dev", "eth0"]);
    expect(await probe(east, west.address, 500)).toEqual({ ok: false, error: "ETIMEDOUT" });
  });

  it("connect() puts an existing host on another subnet", async () => {
    const roamer = await lab.addHost({ name: "roamer", subnet: "east" });
    const [west] = lab.hosts.filter((host) => host.name === "west");
    if (west === undefined) throw new Error("the previous test adds host west");
    expect((await probe(roamer, west.address)).ok).toBe(false);
    const address = await lab.connect(roamer, "west");
    expect(roamer.addressOn("west")).toBe(address);
    expect(roamer.address).toBe(roamer.addressOn("east"));
    expect(await probe(roamer, west.address)).toEqual({ ok: true, reply: "west" });
  });

  it("installs token buckets with the configured rates on both ends of the link", async () => {
    const host = await lab.addHost({ name: "slow", uploadMbit: 8, downloadMbit: 40 });
    const upload = await host.exec("tc", ["qdisc", "show", "dev", "eth0"]);
    expect(upload.stdout).toMatch(/tbf .*rate 8Mbit/);
    const { stdout } = await run("tc", ["-n", lab.switchNamespace, "qdisc", "show"]);
    const download = stdout.split("\n").filter((line) => line.includes("tbf"));
    expect(download).toHaveLength(1);
    expect(download[0]).toMatch(/rate 40Mbit/);
  });

  it("setRate() changes a running link's rates in place, one direction at a time", async () => {
    const host = await lab.addHost({ name: "slowing", uploadMbit: 20, downloadMbit: 20 });
    /** The switch side's token buckets (the download directions) with this rate. */
    const downloads = async (rate: string) => {
      const { stdout } = await run("tc", ["-n", lab.switchNamespace, "qdisc", "show"]);
      return stdout.split("\n").filter((line) => line.includes("tbf") && line.includes(`rate ${rate} `));
    };
    const upload = async () => (await host.exec("tc", ["qdisc", "show", "dev", "eth0"])).stdout;
    expect(await downloads("20Mbit")).toHaveLength(1);
    await lab.setRate(host, { uploadMbit: 2 });
    expect(await upload()).toMatch(/tbf .*rate 2Mbit/);
    // The download side kept its 20 Mbit/s until asked.
    expect(await downloads("20Mbit")).toHaveLength(1);
    await lab.setRate(host, { downloadMbit: 4 });
    expect(await downloads("4Mbit")).toHaveLength(1);
    expect(await downloads("20Mbit")).toHaveLength(0);
    expect(await upload()).toMatch(/tbf .*rate 2Mbit/);
    await expect(lab.setRate(host, { uploadMbit: -1 })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    await expect(lab.setRate(host, { uploadMbit: 1 }, "nowhere")).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });

  it("rejects bad names and options before creating anything", async () => {
    const before = await namespacesStartingWith(lab.name);
    for (const options of [
      { name: "Upper" },
      { name: "x".repeat(21) },
      { name: "switch" },
      { name: "a" }, // taken by the first test
      { name: "neg", uploadMbit: -1 },
      { name: "tinyburst", uploadMbit: 8, burst: 100 },
      { name: "badsubnet", subnet: "no spaces" },
    ]) {
      await expect(lab.addHost(options)).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    }
    expect(await namespacesStartingWith(lab.name)).toEqual(before);
  });

  it("delays with netem, or with the delay line on a kernel without it: the round trips are the configured ones", async () => {
    const [far, farther, near] = await Promise.all([
      lab.addHost({ name: "far", delayMs: 10, uploadMbit: 8 }),
      lab.addHost({ name: "farther", delayMs: 10 }),
      lab.addHost({ name: "near" }),
    ]);
    const { stdout } = await far.exec("tc", ["qdisc", "show", "dev", "eth0"]);
    expect(stdout).toMatch(/tbf .*rate 8Mbit/);
    if (await netemAvailable()) expect(stdout).toMatch(/netem .*delay 10ms/);
    else expect((await far.exec("ip", ["link", "show", "dl0"])).stdout).toContain("dl0");
    await Promise.all([startProbeServer(farther), startProbeServer(near)]);
    // 10 ms each way on each delayed link: far ↔ farther crosses two (40 ms), far ↔ near one (20 ms).
    const both = await connectRoundTripMs(far, farther.address);
    const one = await connectRoundTripMs(far, near.address);
    expect(both).toBeGreaterThanOrEqual(40);
    expect(both).toBeLessThan(55);
    expect(one).toBeGreaterThanOrEqual(20);
    expect(one).toBeLessThan(35);
  });
});

describe("cleaning up", () => {
  it("destroy() ends spawned processes and removes every namespace, and is safe to repeat", async () => {
    const lab = await NetLab.create();
    const host = await lab.addHost({ name: "h", uploadMbit: 10 });
    await lab.addHost({ name: "other", subnet: "second" });
    const sleeper = host.spawn("sleep", ["60"]);
    expect(await namespacesStartingWith(lab.name)).toHaveLength(3);

    await Promise.all([lab.destroy(), lab.destroy()]);
    await lab.destroy();

    expect(await namespacesStartingWith(lab.name)).toEqual([]);
    expect(await waitForExit(sleeper)).toEqual({ code: null, signal: "SIGTERM" });
    expect(() => host.spawn("true")).toThrow(NetLabError);
    await expect(lab.addHost({ name: "late" })).rejects.toMatchObject({ code: "DESTROYED" });
  });

  it("cleanupStale() removes what a crashed run left, processes included", async () => {
    const crashed = await NetLab.create();
    const host = await crashed.addHost({ name: "h" });
    // A grandchild the lab never saw: only the namespace sweep can find it.
    const { stdout } = await host.exec("sh", ["-c", "sleep 60 >/dev/null 2>&1 & echo $!"]);
    const orphan = Number(stdout.trim());
    expect(isAlive(orphan)).toBe(true);

    const removed = await NetLab.cleanupStale(crashed.name);

    expect(removed.sort()).toEqual([`${crashed.name}-h`, `${crashed.name}-switch`]);
    expect(await namespacesStartingWith(crashed.name)).toEqual([]);
    expect(isAlive(orphan)).toBe(false);
  });

  it("refuses to reuse a namespace name that is still taken", async () => {
    const lab = await NetLab.create();
    try {
      await expect(NetLab.create({ name: lab.name })).rejects.toMatchObject({ code: "COMMAND_FAILED" });
      expect(await namespacesStartingWith(lab.name)).toEqual([`${lab.name}-switch`]);
    } finally {
      await lab.destroy();
    }
  });
});
