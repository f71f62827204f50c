import { describe, expect, it } from "vitest";
import { NoShows } from "../../src/averaging/no-shows.ts";

describe("NoShows", () => {
  it("excuses a member that missed a gathering for 30 s, doubling per miss in a row, until it joins one", () => {
    const time = { now: 0 };
    const noShows = new NoShows({ now: () => time.now });
    expect(noShows.excused("p")).toBe(false);
    noShows.missed("p");
    expect(noShows.excused("p")).toBe(true);
    time.now += 30_001;
    expect(noShows.excused("p")).toBe(false);
    noShows.missed("p");
    time.now += 59_999;
    expect(noShows.excused("p")).toBe(true);
    time.now += 2;
    expect(noShows.excused("p")).toBe(false);
    for (let i = 0; i < 10; i++) noShows.missed("p");
    time.now += 10 * 60_000 - 1;
    expect(noShows.excused("p")).toBe(true);
    time.now += 2;
    expect(noShows.excused("p")).toBe(false);
    noShows.missed("p");
    noShows.joined("p");
    expect(noShows.excused("p")).toBe(false);
    // After joining, the next miss starts over at 30 s.
    noShows.missed("p");
    time.now += 30_001;
    expect(noShows.excused("p")).toBe(false);
  });
});
