import { describe, expect, it } from "vitest";
import { latestCheckpointBefore, restartFigures } from "../restart-figures.ts";
import type { AuxHistory } from "../types.ts";
import { at, chaos, checkpoint, incarnation, peer, step } from "./fixtures.ts";

const none = { checkpoints: [], auxRuns: [] };

describe("restart figures", () => {
  it("measures a peer restart on the restarted peer's own steps", () => {
    const others = peer("peer-1", [step(10, 20, "a"), step(14, 21, "b"), step(18, 22, "c")]);
    const old = peer("peer-2", [step(10, 20, "a")], {
      endedAt: at(11),
      exit: { code: null, signal: "SIGKILL" },
    });
    const restarted = peer(
      "peer-2",
      [step(17, 22, "c", { samples: 900, localSamples: 900 }), step(19, 23, "d")],
      {
        index: 1,
        startedAt: at(13),
      },
    );
    const [figure] = restartFigures({
      ...none,
      chaos: [chaos("peer-kill", 11, { target: "peer-2", restartedAt: at(13), started: ["peer-2#1"] })],
      peers: [others, old, restarted],
    });
    expect(figure).toMatchObject({ highestBefore: 20, resumedFrom: 21, stepsLost: 0, outcome: "resumed" });
    // Its first step had only its own samples; the first shared one came 6 s after the restart.
    expect(figure?.secondsToSharedStep).toBeCloseTo(6);
  });

  it("counts the steps lost when the swarm went on from an older state", () => {
    const peers = [
      peer("peer-1", [step(10, 80, "a"), step(30, 61, "b")]),
      peer("peer-2", [step(31, 61, "b")]),
    ];
    const [figure] = restartFigures({
      ...none,
      chaos: [chaos("retoken", 15, { restartedAt: at(20) })],
      peers,
      checkpoints: [checkpoint("c", 50, 5)],
    });
    expect(figure).toMatchObject({ highestBefore: 80, resumedFrom: 60, stepsLost: 20, checkpointBefore: 50 });
    expect(figure?.secondsToSharedStep).toBeCloseTo(10);
  });

  it("takes the swarm's step before a restart from the peers running then, not an older timeline", () => {
    const old = peer("peer-1", [step(10, 80, "a")], { endedAt: at(12) });
    const fresh = peer("peer-1", [step(40, 5, "b"), step(57, 6, "c")], { index: 1, startedAt: at(14) });
    const [figure] = restartFigures({
      ...none,
      chaos: [chaos("platform-restart", 50, { restartedAt: at(55) })],
      peers: [old, fresh],
    });
    expect(figure).toMatchObject({ highestBefore: 5, resumedFrom: 5, stepsLost: 0 });
  });

  it("survives an aux restart only when the new aux posts a step", () => {
    const peers = [peer("peer-1", [step(10, 5, "a"), step(21, 6, "b")]), peer("peer-2", [step(21, 6, "b")])];
    const aux = (posts: number[]): AuxHistory => ({
      incarnation: incarnation("aux", { index: 1, startedAt: at(20) }),
      posts: posts.map(at),
    });
    const restart = [chaos("aux-restart", 15, { restartedAt: at(20), started: ["aux#1"] })];
    const [back] = restartFigures({ ...none, chaos: restart, peers, auxRuns: [aux([24])] });
    expect(back).toMatchObject({ outcome: "resumed", auxBackSeconds: 4 });
    const [gone] = restartFigures({ ...none, chaos: restart, peers, auxRuns: [aux([])] });
    expect(gone).toMatchObject({ outcome: "never", auxBackSeconds: null });
    expect(gone?.secondsToSharedStep).toBeCloseTo(1);
  });

  it("tells a restart never followed by a shared step from a peer stopped again at once", () => {
    const interrupted = peer("peer-1", [], {
      startedAt: at(20),
      index: 1,
      stop: { reason: "chaos: peer-kill", at: at(30) },
    });
    const figures = restartFigures({
      ...none,
      chaos: [
        chaos("peer-kill", 15, { target: "peer-1", restartedAt: at(20), started: ["peer-1#1"] }),
        chaos("platform-restart", 40, { restartedAt: at(42) }),
      ],
      peers: [interrupted],
    });
    expect(figures.map((figure) => figure.outcome)).toEqual(["interrupted", "never"]);
  });

  it("takes the latest checkpoint of the newest generation before a moment", () => {
    const checkpoints = [checkpoint("a", 100, 10), checkpoint("b", 150, 20), checkpoint("c", 40, 30, 1)];
    expect(latestCheckpointBefore(checkpoints, at(25))).toBe(150);
    expect(latestCheckpointBefore(checkpoints, at(35))).toBe(40);
    expect(latestCheckpointBefore(checkpoints, at(5))).toBeNull();
  });
});
