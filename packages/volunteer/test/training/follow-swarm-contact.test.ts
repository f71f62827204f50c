import type { CollaborativeOptimizerEvent, Refusal } from "@barnraise/swarm";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { followSwarmContact, type SwarmContactOptions } from "../../src/training/follow-swarm-contact.ts";

/**
 * The peer's watch over its contact with the swarm, on fakes of the slices it reads (members,
 * refusals, the optimizer's solo steps, the trainer's holds, the platform's public view) and fake
 * timers: what it tells the trainer and the volunteer, and when it drops private steps.
 */

const AUX = "12D3KooWAux";
const OTHER = "12D3KooWOther";

class FakeWorld {
  members: string[] = [];
  refusals: Refusal[] = [];
  alivePeers = 2;
  soloSteps = 0;
  dropped = 0;
  /** The epoch dropSoloSteps goes back to, when there is something to drop. */
  backTo: number | undefined = 40;
  isPrivate: (() => boolean) | undefined;
  readonly holds: string[] = [];
  readonly logs: { level: string; message: string }[] = [];
  refreshes = 0;
  readonly #stepListeners = new Set<(event: CollaborativeOptimizerEvent) => void>();
  readonly #greeted = new Set<(peer: string) => void>();

  options(auxListed = true): SwarmContactOptions {
    return {
      swarm: {
        node: {
          members: () => [...this.members],
          modeOf: (peer: string) => (peer === AUX ? "aux" : "node"),
          onGreeted: (listener: (peer: string) => void) => {
            this.#greeted.add(listener);
            return () => this.#greeted.delete(listener);
          },
          refusedBy: { recent: (withinMs?: number) => this.recent(withinMs) },
        },
      },
      platform: {
        experimentId: "exp",
        get: (() => Promise.resolve({ swarm: { alivePeers: this.alivePeers } })) as never,
      },
      optimizer: {
        get soloSteps() {
          return world.soloSteps;
        },
        dropSoloSteps: () => {
          if (this.soloSteps === 0 || this.backTo === undefined) return undefined;
          this.dropped += 1;
          this.soloSteps = 0;
          return this.backTo;
        },
        treatSoloStepsAsPrivate: (isPrivate: () => boolean) => {
          this.isPrivate = isPrivate;
        },
        on: (listener: (event: CollaborativeOptimizerEvent) => void) => {
          this.#stepListeners.add(listener);
          return () => this.#stepListeners.delete(listener);
        },
      },
      trainer: {
        pause: (hold) => {
          this.holds.push(`pause ${hold}`);
        },
        resume: (hold) => {
          this.holds.push(`resume ${hold}`);
        },
        refreshStatus: () => {
          this.refreshes += 1;
        },
      },
      reporter: {
        log: (level, message) => {
          this.logs.push({ level, message });
        },
        logger: { debug: () => undefined },
      },
      auxListed: () => auxListed,
      signal: new AbortController().signal,
    };
  }

  recent(withinMs = 10 * 60_000): Refusal[] {
    return this.refusals.filter((refusal) => Date.now() - refusal.at <= withinMs);
  }

  refuse(code = "PASS_REVOKED", reason = "the token this node joined with was revoked"): void {
    this.refusals = [{ peer: OTHER, code, reason, at: Date.now() }];
  }

  /** A step applied with nobody else's samples (soloSteps grows), told to the listeners. */
  stepAlone(): void {
    this.soloSteps += 1;
    for (const listener of this.#stepListeners) listener(stepEvent(this.soloSteps));
  }

  greet(peer: string): void {
    for (const listener of this.#greeted) listener(peer);
  }
}

function stepEvent(soloSteps: number): CollaborativeOptimizerEvent {
  return {
    type: "step",
    epoch: 41 + soloSteps,
    groupSize: 1,
    totalWeight: 64,
    localSamples: 64,
    shared: true,
    learningRate: 0.001,
    gradientNorm: 1,
    stateDigest: "0123456789abcdef",
    soloSteps,
  };
}

let world: FakeWorld;
beforeEach(() => {
  vi.useFakeTimers({ now: Date.UTC(2026, 10, 27, 12, 0, 0) });
  world = new FakeWorld();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("followSwarmContact", () => {
  it("says at once that the swarm refuses the node's pass, and holds training after 2 minutes of it", async () => {
    const contact = followSwarmContact(world.options());
    world.refuse();
    world.stepAlone();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(contact.note()).toBe(
      "refused by the swarm: the token this node joined with was revoked — create a new token on the experiment's page and restart the node with it",
    );
    expect(world.logs.map((line) => line.level)).toEqual(["warn"]);
    expect(world.holds).toEqual([]);
    // The members keep refusing it while it trains alone.
    for (let second = 0; second < 120; second += 10) {
      world.refuse();
      world.stepAlone();
      await vi.advanceTimersByTimeAsync(10_000);
    }
    expect(world.holds).toEqual(["pause cut-off"]);
    expect(world.dropped).toBe(1);
    expect(world.logs.at(-1)?.message).toMatch(/^cut off from the swarm: refused by the swarm: .*revoked/);
    expect(contact.note()).toMatch(/— create a new token/);
    expect(world.refreshes).toBeGreaterThan(0);

    // The swarm takes it again: it trains on.
    world.refusals = [];
    world.members = [AUX, OTHER];
    await vi.advanceTimersByTimeAsync(2_000);
    expect(world.holds).toEqual(["pause cut-off", "resume cut-off"]);
    expect(contact.note()).toBeUndefined();
    expect(world.logs.at(-1)?.message).toMatch(/^back in the swarm/);
    contact.stop();
  });

  it("keeps the steps of a lone volunteer whose aux restarts: nobody else trains", async () => {
    world.members = [];
    world.alivePeers = 0;
    const contact = followSwarmContact(world.options());
    for (let second = 0; second < 60; second += 10) {
      world.stepAlone();
      await vi.advanceTimersByTimeAsync(10_000);
    }
    expect(world.isPrivate?.()).toBe(false);
    world.members = [AUX];
    world.greet(AUX);
    expect(world.dropped).toBe(0);
    contact.stop();
  });

  it("never holds a lone volunteer in touch with its aux peer, and its solo steps are the run's", async () => {
    world.members = [AUX];
    const contact = followSwarmContact(world.options());
    for (let second = 0; second < 600; second += 10) {
      world.stepAlone();
      await vi.advanceTimersByTimeAsync(10_000);
    }
    expect(world.isPrivate?.()).toBe(false);
    expect(world.holds).toEqual([]);
    expect(contact.note()).toBeUndefined();
    world.greet(AUX);
    expect(world.dropped).toBe(0);
    contact.stop();
  });

  it("holds a peer that reaches no aux peer while the platform says others train, and not when nobody does", async () => {
    world.members = [];
    world.alivePeers = 0;
    const contact = followSwarmContact(world.options());
    for (let second = 0; second < 300; second += 10) {
      world.stepAlone();
      await vi.advanceTimersByTimeAsync(10_000);
    }
    expect(world.holds).toEqual([]);
    world.alivePeers = 3;
    for (let second = 0; second < 300 && world.holds.length === 0; second += 10) {
      world.stepAlone();
      await vi.advanceTimersByTimeAsync(10_000);
    }
    expect(world.holds).toEqual(["pause cut-off"]);
    expect(contact.note()).toMatch(
      /^the swarm trains \(3 peers alive\) but this peer reaches none of its aux peers/,
    );
    contact.stop();
  });

  it("drops the steps trained alone while cut off as soon as it reaches an aux peer again", async () => {
    world.members = [];
    const contact = followSwarmContact(world.options());
    // Alone, but nothing yet says that others train: the step is the run's.
    expect(world.isPrivate?.()).toBe(false);
    world.stepAlone();
    await vi.advanceTimersByTimeAsync(2_000);
    // The platform says others train: cut off; the steps from now on are private.
    expect(world.isPrivate?.()).toBe(true);
    world.soloSteps = 0;
    world.stepAlone();
    world.stepAlone();
    world.stepAlone();
    // Greeted by another trainer first: not the swarm's anchor; nothing dropped.
    world.greet(OTHER);
    expect(world.dropped).toBe(0);
    world.members = [AUX];
    world.greet(AUX);
    expect(world.dropped).toBe(1);
    expect(world.logs.at(-1)?.message).toBe(
      "reached the swarm again: dropped the 3 step(s) trained alone meanwhile and catching up with the swarm's state from step 40",
    );
    // Nothing private left: a second greeting drops nothing.
    world.greet(AUX);
    expect(world.dropped).toBe(1);
    contact.stop();
  });

  it("treats steps alone as the run's when the platform lists no aux peers", () => {
    const contact = followSwarmContact(world.options(false));
    expect(world.isPrivate?.()).toBe(false);
    world.stepAlone();
    world.greet(AUX);
    expect(world.dropped).toBe(0);
    contact.stop();
  });
});
