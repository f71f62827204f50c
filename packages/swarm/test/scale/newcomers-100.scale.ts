import { availableParallelism } from "node:os";
import { afterAll, describe, expect, it } from "vitest";
import { eventually, TestAuthority } from "../support/swarm-fixtures.ts";
import { seededFloats } from "../support/seeded-random.ts";
import { testConfig } from "../support/swarm-harness.ts";
import { checksum, ThreadedSwarms, type HeldState } from "../support/swarm-threads.ts";

/**
 * A hundred newcomers join a run together and all download its state at once from the eight
 * trainers that hold it (real swarms over worker threads, as in moshpit-64). The state is one
 * chunk, as a small model's is, so each newcomer takes it whole from one donor: the downloads
 * must spread over all eight instead of piling onto one.
 */

const DONORS = 8;
const NEWCOMERS = 100;
const THREADS = Math.max(2, Math.min(8, availableParallelism()));
let swarms: ThreadedSwarms | undefined;
afterAll(async () => {
  await swarms?.stop();
});

describe("a hundred newcomers", () => {
  it("spread their state downloads over all donors", async () => {
    const count = DONORS + NEWCOMERS;
    swarms = await ThreadedSwarms.start(new TestAuthority("exp-newcomers"), testConfig, count, THREADS);
    const threaded = swarms;
    const held: HeldState = { epoch: 7, seed: 31, size: 4_096 };
    const isDonor = (k: number): boolean => k < DONORS;
    await threaded.hold(Array.from({ length: count }, (_, k) => (isDonor(k) ? held : null)));
    await eventually(
      async () => (await threaded.donors(1)).every((known, k) => isDonor(k) || known === DONORS),
      "every newcomer knows the eight donors",
      300_000,
    );

    const started = performance.now();
    const replies = await threaded.catchUp(Array.from({ length: count }, (_, k) => !isDonor(k)));
    const seconds = (performance.now() - started) / 1000;
    const expected = checksum(seededFloats(held.seed, held.size));
    const failures = replies.flatMap((reply, k) =>
      reply !== null && "error" in reply ? [`newcomer ${k}: ${reply.error}`] : [],
    );
    expect(failures).toEqual([]);
    for (const reply of replies.slice(DONORS)) expect(reply).toMatchObject({ epoch: 7, checksum: expected });

    const served = (await threaded.served()).slice(0, DONORS);
    const fair = NEWCOMERS / DONORS;
    const times = replies
      .flatMap((reply) => (reply !== null && "ms" in reply ? [reply.ms] : []))
      .sort((a, b) => a - b);
    process.stdout.write(
      [
        `${NEWCOMERS} newcomers, ${DONORS} donors, a one-chunk state: all caught up in ${seconds.toFixed(1)} s`,
        `downloads per donor: ${served.join(", ")} (fair share ${fair}; max / fair ${(Math.max(...served) / fair).toFixed(2)})`,
        `download time per newcomer: median ${((times[times.length >> 1] ?? 0) / 1000).toFixed(2)} s, max ${((times.at(-1) ?? 0) / 1000).toFixed(2)} s`,
      ].join("\n") + "\n",
    );
    expect(served.reduce((sum, chunks) => sum + chunks, 0)).toBe(NEWCOMERS);
    for (const chunks of served) expect(chunks).toBeGreaterThan(0);
    expect(Math.max(...served)).toBeLessThanOrEqual(3 * fair);
  });
});
