import { afterEach, describe, expect, it } from "vitest";
import { PROBE_FRAME_BYTES } from "../../src/net/link-probe.ts";
import type { Swarm } from "../../src/swarm.ts";
import { eventually, TestAuthority } from "../support/swarm-fixtures.ts";
import { startSwarm } from "../support/swarm-harness.ts";

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop()));
});

async function pair(): Promise<[Swarm, Swarm]> {
  const authority = new TestAuthority();
  const aux = await startSwarm(authority, { mode: "aux" });
  const volunteer = await startSwarm(authority, { bootstrap: aux.node.multiaddrs() });
  swarms.push(aux, volunteer);
  await eventually(() => volunteer.node.members().includes(aux.peerId), "connected", 15_000);
  return [aux, volunteer];
}

describe("link probe (real libp2p on loopback)", () => {
  it("measures both directions against a member and announces the result in the peer's records", async () => {
    const [aux, volunteer] = await pair();
    expect(volunteer.link.current().source).toBe("default");
    const measured = await volunteer.measureLink(aux.peerId);
    expect(measured.source).toBe("probe");
    // Real rates both ways; how fast depends on the machine's load, so no floor is asserted.
    for (const rate of [measured.uploadBytesPerSecond, measured.downloadBytesPerSecond]) {
      expect(Number.isFinite(rate) && rate > 0).toBe(true);
    }

    volunteer.progress.report({ epoch: 0, samplesAccumulated: 0, samplesPerSecond: 0 });
    await volunteer.progress.pushNow();
    await eventually(
      () =>
        aux.progress.records().find((entry) => entry.peerId === volunteer.peerId)?.record.link?.source ===
        "probe",
      "the aux sees the measured link in the volunteer's record",
      10_000,
    );
  }, 30_000);

  it("refuses more concurrent probes than it serves with BUSY, and serves the rest", async () => {
    const [aux, volunteer] = await pair();
    const bytes = 64 * PROBE_FRAME_BYTES;
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, () => volunteer.linkProbe.probe(aux.peerId, bytes)),
    );
    const served = results.filter((result) => result.status === "fulfilled");
    const refused = results.filter((result) => result.status === "rejected");
    expect(served.length).toBeGreaterThanOrEqual(1);
    expect(refused.length).toBeGreaterThanOrEqual(1);
    for (const result of refused) expect(result.reason).toMatchObject({ remoteCode: "BUSY" });
  }, 30_000);
});
