import { describe, expect, it } from "vitest";
import { MemoryNonceStore, ProtocolErrorCode, ReplayGuard } from "../src/index.ts";

describe("memory nonce store", () => {
  it("refuses a key until it expires, then accepts it again", async () => {
    const store = new MemoryNonceStore();
    await expect(store.add("k", 100, 0)).resolves.toBe(true);
    await expect(store.add("k", 200, 99)).resolves.toBe(false);
    await expect(store.add("k", 300, 100)).resolves.toBe(true);
  });

  it("sweeps expired keys so its size stays bounded by the window", async () => {
    const store = new MemoryNonceStore();
    for (let t = 0; t < 1000; t++) await store.add(`n${t}`, t + 10, t);
    expect(store.size).toBeLessThanOrEqual(11);
  });

  it("of concurrent adds of one key, exactly one wins", async () => {
    const store = new MemoryNonceStore();
    const results = await Promise.all(Array.from({ length: 8 }, () => store.add("same", 100, 0)));
    expect(results.filter(Boolean)).toHaveLength(1);
  });
});

describe("replay guard", () => {
  it("keeps a nonce for 2N", async () => {
    const guard = new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 1000 });
    await guard.record("signer", "nonce", 0);
    await expect(guard.record("signer", "nonce", 1999)).rejects.toMatchObject({
      code: ProtocolErrorCode.REQUEST_REPLAYED,
    });
    await expect(guard.record("signer", "nonce", 2000)).resolves.toBeUndefined();
  });

  it("allows a skew of at most N either way", () => {
    const guard = new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 1000 });
    expect(() => {
      guard.checkTime(6000, 5000);
    }).not.toThrow();
    expect(() => {
      guard.checkTime(4000, 5000);
    }).not.toThrow();
    expect(() => {
      guard.checkTime(6001, 5000);
    }).toThrow(expect.objectContaining({ code: "REQUEST_CLOCK_SKEW" }));
    expect(() => {
      guard.checkTime(3999, 5000);
    }).toThrow(expect.objectContaining({ code: "REQUEST_CLOCK_SKEW" }));
  });

  it("needs a positive window", () => {
    expect(() => new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 0 })).toThrow(RangeError);
  });
});
