import { describe, expect, it } from "vitest";
import { Prng } from "../prng.ts";

describe("Prng", () => {
  it("replays the same sequence from the same seed", () => {
    const a = new Prng(42);
    const b = new Prng(42);
    const draws = (rng: Prng) => Array.from({ length: 20 }, () => rng.int(20_000, 40_000));
    const first = draws(a);
    expect(draws(b)).toEqual(first);
    expect(first.every((value) => value >= 20_000 && value <= 40_000)).toBe(true);
    expect(draws(new Prng(43))).not.toEqual(first);
  });

  it("shuffles without losing or adding items", () => {
    const deck = ["peer", "retoken", "aux", "platform"];
    expect(new Prng(7).shuffle(deck).sort()).toEqual([...deck].sort());
  });
});
