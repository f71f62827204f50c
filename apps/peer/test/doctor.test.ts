import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import { doctor, verdicts } from "./support/doctor-run.ts";
import { PeerCliProcess } from "./support/peer-cli-process.ts";

/**
 * `barnraise-peer doctor` as a volunteer runs it, against a running platform (real HTTP) and the
 * organizer's aux peer (a real process): a good machine passes every check and exits 0; a revoked
 * token and an unreachable platform each get their own verdict and exit code. The wrong clock is in
 * doctor-clock.test.ts (it needs a platform whose clock is off).
 */

const AUX_CLI = fileURLToPath(new URL("../../aux/src/cli.ts", import.meta.url));

let platform: PlatformServer;
let dir: string;
let aux: PeerCliProcess | undefined;

beforeAll(async () => {
  platform = await startPlatformServer({
    datasets: { names: ["mnist"], limit: 2_000, recordsPerShard: 1_000 },
  });
  dir = await mkdtemp(join(tmpdir(), "barnraise-doctor-"));
}, 120_000);

afterAll(async () => {
  if (aux?.running === true) aux.kill("SIGKILL");
  await aux?.exited;
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

const machine = (name: string) => [
  "--backend",
  "wasm",
  "--identity",
  join(dir, name, "identity.json"),
  "--data-dir",
  join(dir, name, "data"),
  "--listen",
  "/ip4/127.0.0.1/tcp/0",
];

describe("barnraise-peer doctor", () => {
  it("passes a good machine: every check ok, with the backend's speed and the link's rates", async () => {
    const experiment = await platform.createExperiment({ model: { kind: "mnist-mlp", hiddenUnits: [16] } });
    aux = new PeerCliProcess(
      "aux",
      [
        "--server",
        platform.url.href,
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--identity",
        join(dir, "aux", "identity.json"),
      ],
      { BARNRAISE_TOKEN: await platform.createAuxToken(experiment.id) },
      AUX_CLI,
    );
    await aux.waitFor((record) => record.msg === "registered address", "the aux's registered address");
    const { token } = await platform.addVolunteer(experiment.id, "dora");

    const result = await doctor(["--server", platform.url.href, "--json", ...machine("dora")], {
      BARNRAISE_TOKEN: token,
    });
    expect(verdicts(result), result.stdout).toEqual({
      controls: "ok",
      platform: "ok",
      clock: "ok",
      token: "ok",
      backend: "ok",
      disk: "ok",
      swarm: "ok",
      bandwidth: "ok",
    });
    expect(result.code).toBe(0);
    const summary = (name: string) => result.checks.find((check) => check.name === name)?.summary ?? "";
    expect(summary("controls")).toBe("use at most 100 % of the time");
    expect(summary("token")).toContain("as dora");
    expect(summary("backend")).toMatch(/^wasm .* GFLOP\/s/);
    expect(summary("swarm")).toMatch(/reachable at \/ip4\/127\.0\.0\.1\/tcp\/\d+.*full node/);
    expect(summary("bandwidth")).toMatch(/upload \d+(\.\d)? Mbit\/s, download \d+(\.\d)? Mbit\/s/);
    expect(summary("disk")).toMatch(/free .* the dataset needs/);
  });

  it("prints a plain verdict per check and says the machine can contribute", async () => {
    const experiment = await platform.createExperiment();
    const { token } = await platform.addVolunteer(experiment.id, "pia");
    const result = await doctor(["--server", platform.url.href, "--token", token, ...machine("pia")]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/✓ platform +http:\/\/127\.0\.0\.1:\d+ answers/);
    expect(result.stdout).toMatch(/✓ token +valid: this machine joins/);
    // No aux peer in this run: the peer can start and trains alone until one comes.
    expect(result.stdout).toMatch(/! swarm +the run has no aux peer online/);
    expect(result.stdout).toContain("This machine can contribute");
  });

  it("fails a revoked token with exit code 10 and says what to do", async () => {
    const experiment = await platform.createExperiment();
    const { user, token } = await platform.addVolunteer(experiment.id, "rex");
    await platform.app.db.peerToken.updateMany({
      where: { userId: user.id },
      data: { revokedAt: new Date() },
    });
    const result = await doctor([
      "--server",
      platform.url.href,
      "--token",
      token,
      "--json",
      ...machine("rex"),
    ]);
    expect(result.code).toBe(10);
    expect(verdicts(result)).toMatchObject({ platform: "ok", clock: "ok", token: "fail" });
    const check = result.checks.find((c) => c.name === "token");
    expect(check?.summary).toMatch(/revoked/i);
    expect(check?.advice).toMatch(/create a new token/);
  });

  it("fails an unreachable platform with exit code 20, before anything else", async () => {
    // A port that was free a moment ago: nothing listens there.
    const port = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, "127.0.0.1", () => {
        const address = server.address();
        server.close(() => {
          resolve(typeof address === "object" && address !== null ? address.port : 0);
        });
      });
    });
    const result = await doctor([
      "--server",
      `http://127.0.0.1:${port}`,
      "--token",
      "brp_unused",
      "--json",
      ...machine("nobody"),
    ]);
    expect(result.code).toBe(20);
    expect(result.checks.map((check) => [check.name, check.verdict])).toEqual([
      ["controls", "ok"],
      ["platform", "fail"],
    ]);
    expect(result.checks[1]?.advice).toMatch(/--server/);
  });
});
