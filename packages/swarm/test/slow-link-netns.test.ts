/**
 * Four peers on shaped links with latency (netlab: real network namespaces; needs root like CI, and
 * fails, never skips, when the machine cannot run a lab). One member's link slows to a tenth
 * mid-run: rounds keep succeeding with it in the group. Then it freezes (SIGSTOP: its connections
 * stay open, nothing answers): the others go on without it within seconds, well before the fixed
 * deadlines of the config (matchmaking 30 s, all-reduce 60 s), because the deadlines that drop a
 * member follow the network: the progress records' freshness for matchmaking, a sender deadline
 * and a result deadline from the measured link for the all-reduce.
 */
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { on, PeerProcess, type PeerEvent } from "./support/peer-process.ts";
import { TestAuthority } from "./support/swarm-fixtures.ts";
import { testConfig } from "./support/swarm-harness.ts";

const LENGTH = 200_000;
const MBIT = 20;
const EPOCHS = [1, 2, 3, 4, 5, 6, 7] as const;
const WEIGHTS = [3, 5, 7, 11] as const;
const config = {
  ...testConfig,
  averaging: { ...testConfig.averaging, matchmakingTimeoutMs: 30_000, allreduceTimeoutMs: 60_000 },
};

const authority = new TestAuthority("exp-slow-link-netns");
let lab: NetLab | undefined;
const peers: PeerProcess[] = [];
let hosts: Host[] = [];

type Averaged = Extract<PeerEvent, { event: "averaged" }>;
type Answer = Extract<PeerEvent, { event: "averaged" | "failed" }>;

function startPeer(host: Host, index: number, bootstrap: string[]): PeerProcess {
  const identity = generateKeyPair();
  const peer = PeerProcess.spawn(
    {
      secretKey: toBase64Url(identity.secretKey),
      pass: authority.pass(identity, { username: `slow-${index}`, role: "trainer" }),
      authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
      experimentId: authority.experimentId,
      mode: "node",
      listen: [`/ip4/${host.address}/tcp/0`],
      bootstrap,
      config,
      // Records every second, as the programs push them: a silent member goes stale after 5 s.
      progressIntervalMs: 1_000,
      script: {
        epochs: EPOCHS.map((epoch) => ({
          epoch,
          vector: { seed: 100 * epoch + index, length: LENGTH },
          weight: WEIGHTS[index] ?? 1,
        })),
      },
    },
    (file, args, init) => host.spawnNode(file, args, init),
  );
  peers.push(peer);
  return peer;
}

/** Every peer in `group` reports `epoch` and waits for the others, then all average it at once. */
async function round(group: readonly PeerProcess[], epoch: number): Promise<Answer[]> {
  await Promise.all(
    group.map(async (peer) => {
      const synced = await peer.command(
        `sync ${epoch} ${group.length - 1}`,
        on.answer("synced", "sync"),
        30_000,
      );
      if (synced.event !== "synced") throw new Error(`sync ${epoch} failed: ${JSON.stringify(synced)}`);
    }),
  );
  return Promise.all(group.map((peer) => peer.command(`go ${epoch}`, on.answer("averaged", "go"), 90_000)));
}

function averaged(answers: readonly Answer[]): Averaged[] {
  return answers.map((answer) => {
    if (answer.event !== "averaged") throw new Error(`averaging failed: ${JSON.stringify(answer)}`);
    return answer;
  });
}

describe("a member whose link slows down, then freezes (netlab)", () => {
  beforeAll(async () => {
    const available = await netlabAvailable();
    if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
    lab = await NetLab.create();
    const created = lab;
    // 5 ms each way on every link: 20 ms between two peers.
    hosts = await Promise.all(
      WEIGHTS.map((_, i) =>
        created.addHost({ name: `p${i}`, uploadMbit: MBIT, downloadMbit: MBIT, delayMs: 5 }),
      ),
    );
    const first = startPeer(must(hosts[0]), 0, []);
    const address = must((await first.waitFor(on.ready, 20_000)).addrs[0]);
    for (let i = 1; i < hosts.length; i++) startPeer(must(hosts[i]), i, [address]);
    await Promise.all(peers.map((peer) => peer.waitFor(on.members(hosts.length - 1), 30_000)));
  }, 60_000);

  afterAll(async () => {
    for (const peer of peers) peer.child.kill("SIGCONT");
    await Promise.all(peers.splice(0).map((peer) => peer.stop("SIGKILL")));
    await lab?.destroy();
  });

  it("keeps the slowed member in every round, then goes on without it within seconds once it freezes", async () => {
    const all = [...peers];
    const totalWeight = WEIGHTS.reduce((sum, weight) => sum + weight, 0);
    const together = (answers: readonly Answer[]) => {
      const results = averaged(answers);
      expect(new Set(results.map((result) => result.checksum)).size).toBe(1);
      for (const result of results) expect(result).toMatchObject({ groupSize: 4, totalWeight });
    };
    together(await round(all, 1));
    together(await round(all, 2));

    // p3's link drops to a tenth of its rate, both ways, while its connections stay open.
    await must(lab).setRate(must(hosts[3]), { uploadMbit: MBIT / 10, downloadMbit: MBIT / 10 });
    together(await round(all, 3));
    together(await round(all, 4));

    // p3 freezes as the round starts: SIGSTOP keeps its sockets open, so no peer sees an error.
    const survivors = all.slice(0, 3);
    const victim = must(all[3]);
    const synced = await Promise.all(
      all.map((peer) => peer.command(`sync 5 3`, on.answer("synced", "sync"), 30_000)),
    );
    expect(synced.every((answer) => answer.event === "synced")).toBe(true);
    const going = survivors.map((peer) => peer.command("go 5", on.answer("averaged", "go"), 90_000));
    victim.child.stdin?.write("go 5\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    const frozenAt = performance.now();
    victim.child.kill("SIGSTOP");
    const answers = await Promise.all(going);
    const seconds = (performance.now() - frozenAt) / 1000;
    process.stdout.write(
      `frozen member: the others answered ${seconds.toFixed(1)} s after it froze (${answers.map((answer) => (answer.event === "averaged" ? `averaged in a group of ${answer.groupSize}` : `failed: ${answer.message}`)).join("; ")})\n`,
    );
    // Either the round finished without it or failed for want of its part, and either way within
    // seconds, far from the 30 s matchmaking and 60 s all-reduce deadlines of the config.
    expect(seconds).toBeLessThan(15);
    // The next round forms without it and succeeds.
    const next = averaged(await round(survivors, 6));
    expect(new Set(next.map((result) => result.checksum)).size).toBe(1);
    for (const result of next) {
      expect(result).toMatchObject({ groupSize: 3, totalWeight: totalWeight - WEIGHTS[3] });
    }
  }, 240_000);
});

function must<T>(value: T | undefined): T {
  if (value === undefined) throw new Error("missing test value");
  return value;
}
