import type { PlatformClient, Swarm, TrainingState } from "@barnraise/swarm";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { StateHolder } from "../../src/roles/state-holder.ts";

function state(epoch: number, generation = 0): TrainingState {
  return { epoch, generation, parameters: new Float32Array(3) } as unknown as TrainingState;
}

describe("the state an aux serves", () => {
  it("is replaced only by a newer state of its generation, by any of another, and dropped by clear", () => {
    const held: number[] = [];
    const holder = new StateHolder({
      swarm: {} as unknown as Swarm,
      platform: {} as unknown as PlatformClient,
      logger: pino({ level: "silent" }),
      generation: () => 0,
      onHeld: (served) => held.push(served.epoch),
      onLoaded: () => undefined,
    });
    expect(holder.state).toBeNull();
    holder.hold(state(10), "a checkpoint");
    holder.hold(state(8), "an older checkpoint");
    holder.hold(state(10), "the same step again");
    expect(holder.state?.epoch).toBe(10);
    holder.hold(state(12), "a newer checkpoint");
    // A rollback's generation: its state replaces the held one even though it is older.
    holder.hold(state(5, 1), "the rollback checkpoint");
    expect(holder.state?.epoch).toBe(5);
    expect(held).toEqual([10, 12, 5]);
    holder.clear();
    expect(holder.state).toBeNull();
  });
});
