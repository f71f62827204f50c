import { describe, expect, it } from "vitest";
import { RefusalLog, type RefusalLogOptions } from "../../src/p2p/refusal-log.ts";

const MINUTE = 60_000;

/** A log that reads a clock the test moves by hand. */
function setup(options: Omit<RefusalLogOptions, "now"> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const log = new RefusalLog({ ...options, now: () => clock.now });
  const advance = (ms: number): void => {
    clock.now += ms;
  };
  return { log, clock, advance };
}

describe("RefusalLog", () => {
  it("remembers a refusal with its code, reason and time, and forgets it when the peer shows a valid pass", () => {
    const { log, clock, advance } = setup();
    expect(log.of("a")).toBeUndefined();
    expect(log.recent()).toEqual([]);
    log.record("a", "PASS_REVOKED", "the token this node joined with was revoked");
    const at = clock.now;
    advance(1_000);
    expect(log.of("a")).toEqual({
      peer: "a",
      code: "PASS_REVOKED",
      reason: "the token this node joined with was revoked",
      at,
    });
    expect(log.of("b")).toBeUndefined();
    log.forget("a");
    expect(log.of("a")).toBeUndefined();
    expect(log.recent()).toEqual([]);
    // Forgetting a peer it never refused changes nothing.
    log.record("b", "PASS_EXPIRED", "expired");
    log.forget("nobody");
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["b"]);
  });

  it("lists the refusals newest first", () => {
    const { log, advance } = setup();
    for (const peer of ["a", "b", "c"]) {
      log.record(peer, "PASS_EXPIRED", `${peer}'s pass expired`);
      advance(1_000);
    }
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["c", "b", "a"]);
  });

  it("keeps one entry per peer: a new refusal replaces the old one and makes it the newest", () => {
    const { log, clock, advance } = setup();
    log.record("a", "PASS_EXPIRED", "first");
    advance(1_000);
    log.record("b", "PASS_EXPIRED", "b's");
    advance(1_000);
    log.record("a", "PASS_REVOKED", "second");
    expect(log.recent()).toEqual([
      { peer: "a", code: "PASS_REVOKED", reason: "second", at: clock.now },
      { peer: "b", code: "PASS_EXPIRED", reason: "b's", at: clock.now - 1_000 },
    ]);
    expect(log.of("a")?.reason).toBe("second");
  });

  it("remembers at most maxPeers peers and evicts the one refused longest ago", () => {
    const { log, advance } = setup({ maxPeers: 3 });
    for (const peer of ["a", "b", "c"]) {
      log.record(peer, "PASS_EXPIRED", peer);
      advance(1);
    }
    // a is refused again: b is now the oldest, and goes when d comes.
    log.record("a", "PASS_EXPIRED", "a again");
    advance(1);
    log.record("d", "PASS_EXPIRED", "d");
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["d", "a", "c"]);
    expect(log.of("b")).toBeUndefined();
    expect(log.of("a")?.reason).toBe("a again");
    // Refusing a peer already listed evicts nobody.
    log.record("c", "PASS_EXPIRED", "c again");
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["c", "d", "a"]);
  });

  it("remembers 256 peers by default", () => {
    const { log } = setup();
    for (let i = 0; i <= 256; i++) log.record(`peer-${i}`, "PASS_EXPIRED", "expired");
    const peers = log.recent().map((refusal) => refusal.peer);
    expect(peers).toHaveLength(256);
    expect(peers).not.toContain("peer-0");
    expect(peers[0]).toBe("peer-256");
    expect(peers.at(-1)).toBe("peer-1");
  });

  it("drops refusals older than keepMs, and keeps one exactly keepMs old", () => {
    const { log, advance } = setup({ keepMs: 10_000 });
    log.record("old", "PASS_EXPIRED", "old");
    advance(4_000);
    log.record("new", "PASS_EXPIRED", "new");
    advance(6_000);
    expect(log.of("old")?.reason).toBe("old");
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["new", "old"]);
    advance(1);
    expect(log.of("old")).toBeUndefined();
    expect(log.of("new")?.reason).toBe("new");
    // Asking for a wider window than keepMs brings nothing expired back.
    expect(log.recent(60 * MINUTE).map((refusal) => refusal.peer)).toEqual(["new"]);
    advance(4_000);
    expect(log.recent()).toEqual([]);
    expect(log.of("new")).toBeUndefined();
  });

  it("keeps refusals for 10 minutes by default", () => {
    const { log, advance } = setup();
    log.record("a", "PASS_EXPIRED", "a");
    advance(10 * MINUTE);
    expect(log.of("a")).toBeDefined();
    advance(1);
    expect(log.of("a")).toBeUndefined();
    expect(log.recent()).toEqual([]);
  });

  it("gives only the refusals within the last withinMs, boundary included, when asked", () => {
    const { log, advance } = setup();
    log.record("a", "PASS_EXPIRED", "a");
    advance(30_000);
    log.record("b", "PASS_EXPIRED", "b");
    advance(30_000);
    log.record("c", "PASS_EXPIRED", "c");
    expect(log.recent(MINUTE).map((refusal) => refusal.peer)).toEqual(["c", "b", "a"]);
    advance(1);
    expect(log.recent(MINUTE).map((refusal) => refusal.peer)).toEqual(["c", "b"]);
    expect(log.recent(0)).toEqual([]);
    // Outside the window is not forgotten: the whole log still has it.
    expect(log.recent().map((refusal) => refusal.peer)).toEqual(["c", "b", "a"]);
    expect(log.of("a")?.reason).toBe("a");
  });

  it("cuts a reason to 512 characters, and keeps one of 512 whole", () => {
    const { log } = setup();
    const long = "x".repeat(500) + "y".repeat(100);
    log.record("a", "PASS_BAD_SIGNATURE", long);
    expect(log.of("a")?.reason).toBe(long.slice(0, 512));
    expect(log.of("a")?.reason).toHaveLength(512);
    const exact = "z".repeat(512);
    log.record("b", "PASS_BAD_SIGNATURE", exact);
    expect(log.of("b")?.reason).toBe(exact);
    expect(log.recent().map((refusal) => refusal.reason.length)).toEqual([512, 512]);
  });
});
