import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import { doctor, verdicts } from "./support/doctor-run.ts";

/**
 * `barnraise-peer doctor` on a machine whose clock is 2 minutes off the platform's: here the
 * platform's clock is moved instead (the same offset, seen from the peer). The clock check fails with
 * exit code 21 and says how to fix it; the join fails too, since the pass is not valid yet by this
 * machine's clock, and the token's advice points at the clock.
 */

const OFFSET_MS = 120_000;
let platform: PlatformServer;
let dir: string;

beforeAll(async () => {
  platform = await startPlatformServer({ now: () => Date.now() + OFFSET_MS });
  dir = await mkdtemp(join(tmpdir(), "barnraise-doctor-clock-"));
}, 120_000);

afterAll(async () => {
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

describe("barnraise-peer doctor with a wrong clock", () => {
  it("fails the clock check with exit code 21 and says how to set the clock", async () => {
    const experiment = await platform.createExperiment();
    const { token } = await platform.addVolunteer(experiment.id, "tim");
    const result = await doctor([
      "--server",
      platform.url.href,
      "--token",
      token,
      "--json",
      "--backend",
      "cpu",
      "--identity",
      join(dir, "identity.json"),
      "--data-dir",
      join(dir, "data"),
    ]);
    expect(result.code).toBe(21);
    expect(verdicts(result)).toMatchObject({ platform: "ok", clock: "fail", token: "fail" });
    const clock = result.checks.find((check) => check.name === "clock");
    expect(clock?.summary).toMatch(/^this machine's clock is 1(19|20|21)\.\d s behind the platform's/);
    expect(clock?.advice).toMatch(/allow 30 s.*timedatectl set-ntp true/);
    expect(result.checks.find((check) => check.name === "token")?.advice).toMatch(/fix the clock first/);
  });
});
