/**
 * The volunteer's traffic caps on a real link (netlab: network namespaces; needs root like CI, and
 * fails, never skips, when the machine cannot run a lab). Two peer processes on 100 Mbit/s links
 * average a 3 MB vector; one of them keeps to `--max-upload 2Mbit --max-download 2Mbit` (250 kB/s
 * each way). What its network interface sent and received over the step (the namespace's own
 * counters, headers included), over the step's time, must come out at the cap within 10 % each
 * way: never above it (the cap holds), and not far below (the cap is the bottleneck, not the way it
 * is applied). The other peer, uncapped, waits for it, and both end bit-identical.
 */
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { on, PeerProcess, type PeerEvent } from "./support/peer-process.ts";
import { TestAuthority } from "./support/swarm-fixtures.ts";
import { testConfig } from "./support/swarm-harness.ts";

const LENGTH = 750_000;
const CAP_BYTES_PER_SECOND = 2e6 / 8;
const EPOCHS = [1, 2] as const;
const config = {
  ...testConfig,
  averaging: {
    ...testConfig.averaging,
    matchmakingTimeoutMs: 30_000,
    allreduceTimeoutMs: 120_000,
    chunkSizeBytes: 64 << 10,
  },
};

const authority = new TestAuthority("exp-traffic-caps-netns");
let lab: NetLab | undefined;
const peers: PeerProcess[] = [];
let cappedHost: Host | undefined;

type Averaged = Extract<PeerEvent, { event: "averaged" }>;

function startPeer(host: Host, index: number, bootstrap: string[], capped: boolean): PeerProcess {
  const identity = generateKeyPair();
  const peer = PeerProcess.spawn(
    {
      secretKey: toBase64Url(identity.secretKey),
      pass: authority.pass(identity, { username: `caps-${index}`, role: "trainer" }),
      authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
      experimentId: authority.experimentId,
      mode: "node",
      listen: [`/ip4/${host.address}/tcp/0`],
      bootstrap,
      config,
      progressIntervalMs: 1_000,
      ...(capped ? { caps: { upload: CAP_BYTES_PER_SECOND, download: CAP_BYTES_PER_SECOND } } : {}),
      script: {
        epochs: EPOCHS.map((epoch) => ({
          epoch,
          vector: { seed: 10 * epoch + index, length: LENGTH },
          weight: 1,
        })),
      },
    },
    (file, args, init) => host.spawnNode(file, args, init),
  );
  peers.push(peer);
  return peer;
}

/** Bytes the host's links have sent and received, from its namespace's own /proc/net/dev. */
async function wireBytes(host: Host): Promise<{ sent: number; received: number }> {
  const { stdout } = await host.exec("cat", ["/proc/net/dev"]);
  let sent = 0;
  let received = 0;
  for (const line of stdout.split("\n").slice(2)) {
    const [name, counters] = line.split(":");
    // The host's links to its subnets (eth0 …): not loopback, nor the delay line's TUN device,
    // through which a delayed packet passes before it leaves by eth0.
    if (counters === undefined || !/^eth\d+$/.test(name?.trim() ?? "")) continue;
    const fields = counters.trim().split(/\s+/).map(Number);
    received += fields[0] ?? 0;
    sent += fields[8] ?? 0;
  }
  return { sent, received };
}

async function round(epoch: number): Promise<Averaged[]> {
  await Promise.all(
    peers.map(async (peer) => {
      const synced = await peer.command(`sync ${epoch} 1`, on.answer("synced", "sync"), 30_000);
      if (synced.event !== "synced") throw new Error(`sync ${epoch} failed: ${JSON.stringify(synced)}`);
    }),
  );
  const answers = await Promise.all(
    peers.map((peer) => peer.command(`go ${epoch}`, on.answer("averaged", "go"), 120_000)),
  );
  return answers.map((answer) => {
    if (answer.event !== "averaged") throw new Error(`averaging failed: ${JSON.stringify(answer)}`);
    return answer;
  });
}

describe("traffic caps on a real link (netlab)", () => {
  beforeAll(async () => {
    const available = await netlabAvailable();
    if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
    lab = await NetLab.create();
    const created = lab;
    const hosts = await Promise.all(
      [0, 1].map((i) => created.addHost({ name: `c${i}`, uploadMbit: 100, downloadMbit: 100, delayMs: 2 })),
    );
    const [capped, free] = hosts as [Host, Host];
    cappedHost = capped;
    const first = startPeer(capped, 0, [], true);
    const address = (await first.waitFor(on.ready, 20_000)).addrs[0];
    if (address === undefined) throw new Error("the capped peer listens nowhere");
    startPeer(free, 1, [address], false);
    await Promise.all(peers.map((peer) => peer.waitFor(on.members(1), 30_000)));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(peers.splice(0).map((peer) => peer.stop("SIGKILL")));
    await lab?.destroy();
  });

  it("keeps the capped peer at 2 Mbit/s each way, within 10 %", async () => {
    const host = cappedHost;
    if (host === undefined) throw new Error("no lab");
    for (const epoch of EPOCHS) {
      const before = await wireBytes(host);
      const [capped, free] = (await round(epoch)) as [Averaged, Averaged];
      const after = await wireBytes(host);
      expect(capped.checksum).toBe(free.checksum);
      expect(capped.groupSize).toBe(2);
      // On the wire over the step (the counters also saw the sync before it: a few records).
      const sent = after.sent - before.sent;
      const received = after.received - before.received;
      const up = sent / capped.seconds;
      const down = received / capped.seconds;
      process.stdout.write(
        `traffic caps: epoch ${epoch}: on the wire ${(sent / 1e6).toFixed(2)} MB up, ${(received / 1e6).toFixed(2)} MB down (the step's payload ${(capped.bytesSent / 1e6).toFixed(2)} MB up) in ${capped.seconds.toFixed(2)} s: ${((up * 8) / 1e6).toFixed(3)} Mbit/s up, ${((down * 8) / 1e6).toFixed(3)} Mbit/s down (cap 2)\n`,
      );
      // The step moves the vector each way (a part out, the results back): far over a burst.
      expect(capped.bytesSent).toBeGreaterThan(LENGTH * 4 * 0.4);
      expect(up / CAP_BYTES_PER_SECOND).toBeGreaterThan(0.9);
      expect(up / CAP_BYTES_PER_SECOND).toBeLessThan(1.1);
      expect(down / CAP_BYTES_PER_SECOND).toBeGreaterThan(0.9);
      expect(down / CAP_BYTES_PER_SECOND).toBeLessThan(1.1);
    }
  }, 180_000);
});
