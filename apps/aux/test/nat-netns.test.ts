import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PeerCliProcess, writeEvents, type LogRecord } from "../../peer/test/support/peer-cli-process.ts";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";

/**
 * Volunteers at home behind NAT, with the product's programs in a network-namespace lab (needs
 * root, like CI; fails rather than skips when the machine cannot run a lab):
 *
 *   public side "wan": the platform, the aux peer, and the outside of three home routers
 *   home1, home2: a volunteer behind a masquerading NAT router (nftables)
 *   home3:        the same behind a strict NAT: random outside ports, unsolicited packets dropped
 *
 * Each volunteer runs the command the volunteer page shows, `barnraise-peer --server URL --token T`,
 * with no flag (each with a home directory of its own, as on its own machine). None of them can be
 * dialed: they must find that out (the aux dials back and fails), hold a slot on the aux's relay,
 * meet each other through it, and train one model together with the aux reducing the parts, while
 * the aux uploads checkpoints it downloads from them. The lab's subnets are 10.x ranges, which
 * libp2p dials and announces as it does any address (it has no address filter configured), so no
 * public address is borrowed.
 */

const AUX_CLI = new URL("../src/cli.ts", import.meta.url).pathname;
const PLATFORM_PORT = 8080;
const config = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [32] },
  training: { targetBatchSize: 1024, localBatchSize: 64 },
  optimizer: { name: "adam" as const, learningRate: 0.003 },
  averaging: { matchmakingTimeoutMs: 4_000, allreduceTimeoutMs: 8_000 },
  checkpoints: { everySteps: 5 },
};

let lab: NetLab | undefined;
let platform: PlatformServer;
let dir: string;
let server: string;
const hosts = new Map<string, Host>();
const processes: PeerCliProcess[] = [];

beforeAll(async () => {
  const available = await netlabAvailable();
  if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
  lab = await NetLab.create();
  const [platformHost, auxHost] = await Promise.all([
    lab.addHost({ name: "platform", subnet: "wan" }),
    lab.addHost({ name: "aux", subnet: "wan" }),
  ]);
  hosts.set("platform", platformHost).set("aux", auxHost);
  for (const k of [1, 2, 3]) {
    const router = await lab.addNatRouter({
      name: `router${k}`,
      inside: `home${k}`,
      outside: "wan",
      strict: k === 3,
    });
    const home = await lab.addHost({ name: `home${k}`, subnet: `home${k}` });
    await lab.useGateway(home, router);
    hosts.set(`router${k}`, router).set(`home${k}`, home);
  }
  platform = await startPlatformServer({
    datasets: { names: ["mnist"], limit: 6_000, recordsPerShard: 1_000 },
  });
  const served = await lab.exposeOutside(platformHost, PLATFORM_PORT, {
    host: "127.0.0.1",
    port: Number(platform.url.port),
  });
  server = `http://${served}/`;
  dir = await mkdtemp(join(tmpdir(), "barnraise-nat-"));
}, 120_000);

afterAll(async () => {
  for (const child of processes) if (child.running) child.kill("SIGKILL");
  await Promise.all(processes.map((child) => child.exited));
  await lab?.destroy();
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

/** The page's command on `hostName`, with a home directory of its own. */
async function volunteer(hostName: string, token: string): Promise<PeerCliProcess> {
  const home = join(dir, hostName);
  await mkdir(home, { recursive: true });
  const child = new PeerCliProcess(
    hostName,
    ["--server", server, "--token", token],
    { HOME: home },
    undefined,
    hosts.get(hostName),
  );
  processes.push(child);
  return child;
}

const stepOf = (record: LogRecord): number => Number(record.step);
const isStep = (record: LogRecord) => /^step \d+$/.test(record.msg);

describe("three volunteers behind NAT train one model together (netlab)", () => {
  it("find out they cannot be dialed, meet through the aux's relay, and average in one group", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    const experiment = await platform.createExperiment(config);
    const auxHome = join(dir, "aux");
    await mkdir(auxHome, { recursive: true });
    const aux = new PeerCliProcess(
      "aux",
      ["--server", server, "--token", await platform.createAuxToken(experiment.id)],
      { HOME: auxHome },
      AUX_CLI,
      hosts.get("aux"),
    );
    processes.push(aux);
    await aux.waitFor((r) => r.msg === "registered address", "address registration", 60_000);

    const homes: PeerCliProcess[] = [];
    for (const k of [1, 2, 3]) {
      const { token } = await platform.addVolunteer(experiment.id, `home${k}-owner`);
      homes.push(await volunteer(`home${k}`, token));
    }
    const routers = [1, 2, 3].map((k) => hosts.get(`router${k}`)?.address ?? "");

    for (const [k, home] of homes.entries()) {
      // The aux saw the request come from the home's router and could not dial it there.
      const unreachable = await home.waitFor(
        (r) => r.msg.startsWith("not reachable from outside"),
        "the reachability verdict",
        30_000,
      );
      expect(String(unreachable.observed)).toContain(`/ip4/${routers[k]}/tcp/`);
      await home.waitFor((r) => r.msg.startsWith("holding a relay slot on aux peer"), "a relay slot", 30_000);
    }
    // Every pair of homes is connected, through the relay; each home reaches the aux directly.
    for (const home of homes) {
      await home.waitFor(
        (r) => r.msg.startsWith("connected to member") && r.path === "direct" && r.mode === "aux",
        "a direct connection to the aux",
        30_000,
      );
      for (const other of homes) {
        if (other === home) continue;
        const peerId = (await other.waitFor((r) => r.msg === "listening", "its start", 30_000)).peerId;
        await home.waitFor(
          (r) => r.msg.startsWith("connected to member") && r.peer === peerId && r.path === "relayed",
          `a relayed connection to ${other.name}`,
          60_000,
        );
      }
    }

    // They train together: a step that all three averaged in one group (with the aux reducing),
    // with the same averaged gradient everywhere.
    const grouped = (home: PeerCliProcess) =>
      home.records.filter((r) => isStep(r) && Number(r.groupSize) >= 4);
    await homes[0]?.waitFor(
      (r) => isStep(r) && Number(r.groupSize) >= 4 && stepOf(r) >= 3,
      "a group step",
      120_000,
    );
    const deadline = Date.now() + 60_000;
    let common: number | undefined;
    while (common === undefined && Date.now() < deadline) {
      const sets = homes.map((home) => new Set(grouped(home).map(stepOf)));
      common = [...(sets[0] ?? [])].find((step) => sets.every((set) => set.has(step)));
      if (common === undefined) await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    expect(common).toBeDefined();
    const norms = homes.map((home) => grouped(home).find((r) => stepOf(r) === common)?.gradientNorm);
    expect(new Set(norms).size).toBe(1);

    // Each volunteer's status record says how it takes part: a client, with the aux reached
    // directly and the two other homes through the relay (or hole punched).
    for (const home of homes) {
      await home.waitFor(
        (r) => {
          const network = r.network as
            { mode?: string; direct?: number; relayed?: number; upgraded?: number } | null | undefined;
          return (
            r.msg === "status" &&
            network?.mode === "client" &&
            (network.direct ?? 0) >= 1 &&
            (network.relayed ?? 0) + (network.upgraded ?? 0) >= 2
          );
        },
        "a status record with the paths",
        30_000,
      );
    }

    // The aux downloads the state from a volunteer and uploads checkpoints.
    await aux.waitFor((r) => r.msg === "checkpoint uploaded", "a checkpoint upload", 120_000);

    // Each home's samples count on the leaderboard (the aux reports contributions every few
    // seconds, so the credit may come a little after the checkpoint).
    const credited = async () => {
      const response = await fetch(new URL(`/api/v1/experiments/${experiment.id}/leaderboard`, platform.url));
      const { entries } = (await response.json()) as {
        entries: Array<{ username: string; samples: number }>;
      };
      return [1, 2, 3].map((k) => entries.find((entry) => entry.username === `home${k}-owner`)?.samples ?? 0);
    };
    const creditDeadline = Date.now() + 60_000;
    let samples = await credited();
    while (samples.some((count) => count === 0) && Date.now() < creditDeadline) {
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      samples = await credited();
    }
    for (const count of samples) expect(count).toBeGreaterThan(0);
  }, 300_000);
});
