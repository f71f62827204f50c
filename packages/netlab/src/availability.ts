/**
 * Can this machine run a lab? Tests call {@link netlabAvailable} first and fail with its reason (they
 * must not skip silently: CI machines are root). {@link netemAvailable} says whether `delayMs` works:
 * some kernels are built without the netem qdisc.
 */
import { randomBytes } from "node:crypto";
import { ip, runProcess, systemTool, tc } from "./run-command.ts";

/** The answer of {@link netlabAvailable}. */
export type NetLabAvailability = { ok: true } | { ok: false; reason: string };

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Runs `body` in a throwaway namespace, deleted afterwards whatever happens. */
async function withScratchNamespace<T>(body: (namespace: string) => Promise<T>): Promise<T> {
  const namespace = `nlprobe${randomBytes(4).toString("hex")}`;
  await ip(["netns", "add", namespace]);
  try {
    return await body(namespace);
  } finally {
    await runProcess(systemTool("ip"), ["netns", "delete", namespace]);
  }
}

/**
 * Checks everything a lab needs: root, `ip` and `tc`, and creating a namespace with a bridge, a veth
 * pair and a tbf qdisc in it. Never throws; the reason says what is missing.
 */
export async function netlabAvailable(): Promise<NetLabAvailability> {
  if (process.platform !== "linux")
    return { ok: false, reason: `netlab needs Linux, this is ${process.platform}` };
  const uid = process.getuid?.();
  if (uid !== 0) return { ok: false, reason: `netlab needs root (uid 0), this process runs as uid ${uid}` };
  for (const tool of ["ip", "tc"]) {
    const result = await runProcess(systemTool(tool), ["-V"]).catch((error: unknown) => message(error));
    if (typeof result === "string" || result.exitCode !== 0) {
      return {
        ok: false,
        reason: `\`${tool}\` (iproute2) is not usable: ${typeof result === "string" ? result : result.stderr}`,
      };
    }
  }
  try {
    await withScratchNamespace(async (ns) => {
      await ip(["-n", ns, "link", "add", "nlbr", "type", "bridge"]);
      await ip(["-n", ns, "link", "add", "nla", "type", "veth", "peer", "name", "nlb"]);
      await ip(["-n", ns, "link", "set", "nla", "master", "nlbr", "up"]);
      await tc([
        "-n",
        ns,
        "qdisc",
        "replace",
        "dev",
        "nla",
        "root",
        "tbf",
        "rate",
        "1mbit",
        "burst",
        "16k",
        "limit",
        "64k",
      ]);
    });
  } catch (error) {
    return { ok: false, reason: `cannot build a namespace with a bridge, veth and tbf: ${message(error)}` };
  }
  return { ok: true };
}

/** True when `tc` can add a netem qdisc in `namespace` (it tries on `lo` and removes it again). */
export async function probeNetem(namespace: string): Promise<boolean> {
  const add = await runProcess(systemTool("tc"), [
    "-n",
    namespace,
    "qdisc",
    "add",
    "dev",
    "lo",
    "root",
    "netem",
    "delay",
    "1ms",
  ]);
  if (add.exitCode !== 0) return false;
  await runProcess(systemTool("tc"), ["-n", namespace, "qdisc", "del", "dev", "lo", "root"]);
  return true;
}

/** True when this kernel has the netem qdisc, which `delayMs` needs. False also when labs cannot run. */
export async function netemAvailable(): Promise<boolean> {
  try {
    return await withScratchNamespace(probeNetem);
  } catch {
    return false;
  }
}
