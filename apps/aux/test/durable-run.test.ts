import { mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadOrCreateIdentity } from "@barnraise/swarm/node";
import { PeerCliProcess, writeEvents, type LogRecord } from "../../peer/test/support/peer-cli-process.ts";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";

/**
 * A run outlives its volunteers (DESIGN §9), with the product's own programs: the platform over
 * HTTP, `barnraise-aux` and `barnraise-peer` processes. The swarm trains until a checkpoint exists,
 * every peer is killed with SIGKILL, and a brand-new volunteer's peer starts alone: it loads the
 * aux's checkpoint and the run goes on past the step it had reached, with the trained model's
 * loss, not an untrained one's. Meanwhile the public page says how many trainers are alive. And
 * when the same volunteers come back instead (a power cut), with the keys they had, under an aux
 * that stayed up and led their groups, they go over the epochs after the checkpoint together again.
 */

const AUX_CLI = new URL("../src/cli.ts", import.meta.url).pathname;
const config = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [32] },
  training: { targetBatchSize: 2048, localBatchSize: 64 },
  optimizer: { name: "adam" as const, learningRate: 0.003 },
  averaging: { matchmakingTimeoutMs: 4_000, allreduceTimeoutMs: 6_000 },
  checkpoints: { everySteps: 5 },
};
/** An untrained 10-class model's cross-entropy is ln 10 ≈ 2.30. */
const UNTRAINED_LOSS = Math.log(10);

let platform: PlatformServer;
let dir: string;
const processes: PeerCliProcess[] = [];

beforeAll(async () => {
  platform = await startPlatformServer({
    datasets: { names: ["mnist"], limit: 6_000, recordsPerShard: 1_000 },
  });
  dir = await mkdtemp(join(tmpdir(), "barnraise-durable-"));
}, 120_000);

afterAll(async () => {
  for (const child of processes) if (child.running) child.kill("SIGKILL");
  await Promise.all(processes.map((child) => child.exited));
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

function start(name: string, token: string, cli?: string): PeerCliProcess {
  const args = ["--server", platform.url.href, "--identity", join(dir, name, "identity.json")];
  args.push("--listen", "/ip4/127.0.0.1/tcp/0");
  if (cli === undefined) args.push("--backend", "wasm", "--data-dir", join(dir, name, "data"));
  const child = new PeerCliProcess(name, args, { BARNRAISE_TOKEN: token }, cli);
  processes.push(child);
  return child;
}

const stepOf = (record: LogRecord): number => Number(record.step);

interface PublicView {
  readonly swarm: { readonly alivePeers: number; readonly waitingSince: string | null };
}

describe("a run outlives its volunteers", () => {
  it("continues from the aux's checkpoint when every peer was killed and a new volunteer joins", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    const experiment = await platform.createExperiment(config);
    const aux = start("aux", await platform.createAuxToken(experiment.id), AUX_CLI);
    await aux.waitFor((r) => r.msg === "registered address", "address registration", 60_000);
    const { token } = await platform.addVolunteer(experiment.id, "vera");
    const first = [start("vera-1", token), start("vera-2", token)];

    const uploaded = await aux.waitFor(
      (r) => r.msg === "checkpoint uploaded" && stepOf(r) >= 5,
      "a checkpoint",
      180_000,
    );
    const served = await aux.waitFor((r) => r.msg.startsWith("serving "), "the checkpoint held", 30_000);
    expect(stepOf(served)).toBe(stepOf(uploaded));
    // Let the swarm get a little past the checkpoint: those steps are lost with the peers.
    const before = await first[0]?.waitFor(
      (r) => r.msg.startsWith("step ") && stepOf(r) >= stepOf(uploaded) + 1,
      "a step past the checkpoint",
      120_000,
    );
    const reached = Math.max(
      ...first.flatMap((peer) => peer.records.filter((r) => r.msg.startsWith("step ")).map(stepOf)),
    );
    expect(reached).toBeGreaterThan(stepOf(uploaded));
    expect(before).toBeDefined();
    for (const peer of first) peer.kill("SIGKILL");
    await Promise.all(first.map((peer) => peer.exited));

    // Nobody trains: the public page says so within 30 s.
    await expect
      .poll(
        async () => {
          const response = await fetch(new URL(`api/v1/experiments/${experiment.id}`, platform.url));
          const view = (await response.json()) as PublicView;
          return view.swarm.alivePeers === 0 && view.swarm.waitingSince !== null;
        },
        { timeout: 45_000, interval: 1_000 },
      )
      .toBe(true);

    // A brand-new volunteer with a new identity, alone with the aux.
    const { token: newcomerToken } = await platform.addVolunteer(experiment.id, "nora");
    const startedAt = Date.now();
    const newcomer = start("nora-1", newcomerToken);
    const loaded = await newcomer.waitFor(
      (r) => r.msg.startsWith("loaded the swarm's state"),
      "the checkpoint loaded",
      60_000,
    );
    expect(stepOf(loaded)).toBe(stepOf(uploaded));
    const next = await newcomer.waitFor(
      (r) => r.msg.startsWith("step ") && stepOf(r) > reached,
      "a step past the one reached before the crash",
      120_000,
    );
    expect(stepOf(next)).toBeGreaterThan(reached);
    const firstStep = newcomer.records.find((r) => r.msg.startsWith("step "));
    expect(firstStep).toBeDefined();
    const firstStepSeconds = ((Date.now() - startedAt) / 1000).toFixed(1);
    // The newcomer trains the checkpoint's model: its minibatch losses are a trained model's.
    const status = newcomer.records.filter((r) => r.msg === "status" && typeof r.loss === "number");
    const losses = status.map((r) => Number(r.loss)).slice(0, 5);
    expect(losses.length).toBeGreaterThan(0);
    for (const loss of losses) expect(loss).toBeLessThan(UNTRAINED_LOSS * 0.8);
    process.stdout.write(`durable run: a lone newcomer's first step after ${firstStepSeconds} s\n`);

    newcomer.kill("SIGINT");
    expect((await newcomer.exited).code).toBe(0);
    aux.kill("SIGINT");
    expect((await aux.exited).code).toBe(0);
  }, 420_000);

  it("trains together again when every peer was killed and came back with the same keys, under an aux that led their groups", async ({
    onTestFailed,
  }) => {
    onTestFailed(() => {
      writeEvents(processes);
    });
    // The lowest PeerId leads each group: the aux gets it, so the groups of the epochs before the
    // crash are the aux's, and they come back when the swarm resumes from its checkpoint.
    const keys = await Promise.all(
      ["k0", "k1", "k2"].map(async (name) => ({
        file: join(dir, `${name}.json`),
        peerId: (await loadOrCreateIdentity(join(dir, `${name}.json`))).peerId,
      })),
    );
    keys.sort((a, b) => (a.peerId < b.peerId ? -1 : 1));
    const names = ["leader-aux", "pia-1", "pia-2"];
    for (const [i, name] of names.entries()) {
      await mkdir(join(dir, name), { recursive: true });
      await rename(keys[i]?.file ?? "", join(dir, name, "identity.json"));
    }
    const experiment = await platform.createExperiment(config);
    const aux = start("leader-aux", await platform.createAuxToken(experiment.id), AUX_CLI);
    await aux.waitFor((r) => r.msg === "registered address", "address registration", 60_000);
    const { token } = await platform.addVolunteer(experiment.id, "pia");
    const first = [start("pia-1", token), start("pia-2", token)];
    const uploaded = await aux.waitFor(
      (r) => r.msg === "checkpoint uploaded" && stepOf(r) >= 5,
      "a checkpoint",
      180_000,
    );
    await first[0]?.waitFor(
      // Two steps short of the next checkpoint (every 5 steps), so that the swarm resumes from this one.
      (r) => r.msg.startsWith("step ") && stepOf(r) >= stepOf(uploaded) + 3,
      "steps past the checkpoint",
      120_000,
    );
    for (const peer of first) peer.kill("SIGKILL");
    await Promise.all(first.map((peer) => peer.exited));
    const reached = Math.max(
      ...first.flatMap((peer) => peer.records.filter((r) => r.msg.startsWith("step ")).map(stepOf)),
    );

    const again = [start("pia-1", token), start("pia-2", token)];
    const loaded = await Promise.all(
      again.map((peer) =>
        peer.waitFor((r) => r.msg.startsWith("loaded the swarm's state"), "the checkpoint loaded", 60_000),
      ),
    );
    const resumedFrom = Math.min(...loaded.map(stepOf));
    expect(resumedFrom).toBeLessThan(reached);
    await Promise.all(
      again.map((peer) =>
        peer.waitFor(
          (r) => r.msg.startsWith("step ") && stepOf(r) > reached,
          "a step past the crash",
          120_000,
        ),
      ),
    );
    // The epochs they had averaged before are averaged again, in new groups. Handed the groups they
    // had before the crash (over at the aux, with the weights of then), every one of those epochs
    // failed its first round; a new group fails now and then, on an address that changed.
    const failedEpochs = new Set(
      again.flatMap((peer) =>
        peer.records
          .map((r) => /^averaging for step (\d+) failed/.exec(r.msg)?.[1])
          .filter((step) => step !== undefined)
          .map(Number)
          .filter((step) => step <= reached),
      ),
    );
    const redone = reached - resumedFrom;
    expect(redone).toBeGreaterThanOrEqual(3);
    expect(failedEpochs.size).toBeLessThanOrEqual(redone / 2);
    const weightRefusals = again.flatMap((peer) =>
      peer.records.filter((r) => JSON.stringify(r).includes("disagrees with the group's weight")),
    );
    expect(weightRefusals).toEqual([]);

    for (const peer of again) peer.kill("SIGINT");
    aux.kill("SIGINT");
    await Promise.all([...again, aux].map((child) => child.exited));
  }, 420_000);
});
