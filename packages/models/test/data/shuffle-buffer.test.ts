import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../src/seeded-random.ts";
import { ShuffleBuffer, shuffled } from "../../src/data/shuffle-buffer.ts";

async function* count(n: number): AsyncGenerator<number> {
  for (let i = 0; i < n; i++) {
    await Promise.resolve();
    yield i;
  }
}

async function collect<T>(source: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of source) out.push(item);
  return out;
}

describe("ShuffleBuffer", () => {
  it("emits every item exactly once, in a seeded, mixed order", async () => {
    const a = await collect(shuffled(count(1000), new ShuffleBuffer<number>(64, new SeededRandom(1))));
    const again = await collect(shuffled(count(1000), new ShuffleBuffer<number>(64, new SeededRandom(1))));
    const b = await collect(shuffled(count(1000), new ShuffleBuffer<number>(64, new SeededRandom(2))));
    expect([...a].sort((x, y) => x - y)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(again).toEqual(a);
    expect(b).not.toEqual(a);
    // A real shuffle rarely keeps two neighbours together; a pass-through keeps almost all.
    const neighbours = a.filter((item, position) => a[position + 1] === item + 1).length;
    expect(neighbours).toBeLessThan(50);
  });

  it("fills up before emitting, then replaces the item it emits", () => {
    const buffer = new ShuffleBuffer<number>(4, new SeededRandom(9));
    for (let i = 0; i < 4; i++) expect(buffer.add(i)).toBeUndefined();
    const held = new Set([0, 1, 2, 3]);
    for (let i = 4; i < 100; i++) {
      const out = buffer.add(i);
      expect(out).toBeDefined();
      expect(held.has(out ?? -1)).toBe(true);
      held.delete(out ?? -1);
      held.add(i);
      expect(buffer.size).toBe(4);
    }
    expect(new Set(buffer.drain())).toEqual(held);
    expect(buffer.size).toBe(0);
  });

  it("moves an item at most a bounded distance earlier: a buffer only mixes neighbours", async () => {
    const out = await collect(shuffled(count(500), new ShuffleBuffer<number>(16, new SeededRandom(3))));
    out.forEach((item, position) => {
      expect(item).toBeLessThanOrEqual(position + 16);
    });
  });

  it("with capacity 1 keeps the order", async () => {
    expect(await collect(shuffled(count(20), new ShuffleBuffer<number>(1, new SeededRandom(0))))).toEqual(
      Array.from({ length: 20 }, (_, i) => i),
    );
  });

  it("refuses a capacity that is not a positive integer", () => {
    expect(() => new ShuffleBuffer(0, new SeededRandom(0))).toThrow(/positive integer/);
    expect(() => new ShuffleBuffer(2.5, new SeededRandom(0))).toThrow(/positive integer/);
  });
});
