import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PeerActivity, silenceTimeout } from "../../src/averaging/peer-activity.ts";

describe("silence deadlines", () => {
  beforeEach(() => {
    vi.useFakeTimers({
      toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"],
    });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("expire a peer never heard from after the deadline", () => {
    const activity = new PeerActivity();
    const expired = vi.fn();
    silenceTimeout(activity, "a", 1_000, expired);
    vi.advanceTimersByTime(999);
    expect(expired).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(expired).toHaveBeenCalledOnce();
  });

  it("wait the deadline again from the last time the peer was heard from, however often", () => {
    const activity = new PeerActivity();
    const expired = vi.fn();
    silenceTimeout(activity, "a", 1_000, expired);
    for (let i = 0; i < 5; i++) {
      vi.advanceTimersByTime(700);
      activity.heard("a");
    }
    // 3.5 s have passed, and "a" spoke 0.7 s apart all along.
    vi.advanceTimersByTime(999);
    expect(expired).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(expired).toHaveBeenCalledOnce();
  });

  it("are not held off by other peers, and stop when cleared", () => {
    const activity = new PeerActivity();
    const expired = vi.fn();
    silenceTimeout(activity, "a", 1_000, expired);
    vi.advanceTimersByTime(500);
    activity.heard("b");
    vi.advanceTimersByTime(500);
    expect(expired).toHaveBeenCalledOnce();
    expect(activity.silentFor("a")).toBe(Infinity);
    expect(activity.silentFor("b")).toBe(500);

    const cleared = vi.fn();
    const pending = silenceTimeout(activity, "a", 1_000, cleared);
    vi.advanceTimersByTime(500);
    pending.clear();
    vi.advanceTimersByTime(5_000);
    expect(cleared).not.toHaveBeenCalled();
  });

  it("without a record of activity are a plain deadline", () => {
    const expired = vi.fn();
    const timer = silenceTimeout(undefined, "a", 1_000, expired);
    vi.advanceTimersByTime(1_000);
    expect(expired).toHaveBeenCalledOnce();
    timer.clear();
  });
});
