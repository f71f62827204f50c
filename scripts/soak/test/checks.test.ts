import { describe, expect, it } from "vitest";
import {
  checkCredit,
  checkOneModel,
  checkpointOrderProblems,
  checkpointSnapshotProblems,
  checkPlatformLog,
  checkProcesses,
  checkRecorded,
  checkRecovery,
  checkStepSamples,
  checkStepsForward,
  indexMetrics,
  metricSnapshotProblems,
  timelineProblems,
} from "../checks.ts";
import type { RestartFigure } from "../restart-figures.ts";
import { PRIVATE_STEP_HEAL_MS } from "../checks/one-model.ts";
import { at, chaos, checkpoint, incarnation, peer, point, status, step } from "./fixtures.ts";

const series = (points: ReturnType<typeof point>[]) => ({ points, total: points.length, events: [] });

describe("steps only moved forward", () => {
  it("accepts steps recorded in increasing order per timeline, ties in time included", () => {
    expect(timelineProblems([point(0, 1, 10), point(0, 2, 12), point(0, 3, 12), point(1, 2, 20)])).toEqual(
      [],
    );
  });

  it("finds a step recorded after a higher one of its timeline", () => {
    const problems = timelineProblems([point(0, 5, 10), point(0, 4, 11)]);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain("step 4");
  });

  it("finds a recorded step rewritten or lost between two reads", () => {
    const before = indexMetrics(series([point(0, 1, 10), point(0, 2, 11)]));
    expect(
      metricSnapshotProblems(before, series([point(0, 1, 10), point(0, 2, 11), point(0, 3, 12)])),
    ).toEqual([]);
    expect(metricSnapshotProblems(before, series([point(0, 1, 10), point(0, 2, 11, 9)]))[0]).toContain(
      "rewritten",
    );
    expect(metricSnapshotProblems(before, series([point(0, 1, 10)]))[0]).toContain("disappeared");
    // A downsampled answer may leave a step out.
    expect(metricSnapshotProblems(before, { points: [point(0, 1, 10)], total: 2, events: [] })).toEqual([]);
  });

  it("finds a checkpoint behind an earlier one of its generation, or one that disappeared", () => {
    expect(
      checkpointOrderProblems([
        checkpoint("a", 50, 10),
        checkpoint("b", 100, 20),
        checkpoint("c", 20, 30, 1),
      ]),
    ).toEqual([]);
    expect(checkpointOrderProblems([checkpoint("a", 100, 10), checkpoint("b", 50, 20)])).toHaveLength(1);
    const known = new Map([["a", checkpoint("a", 50, 10)]]);
    expect(checkpointSnapshotProblems(known, [checkpoint("a", 50, 10)])).toEqual([]);
    expect(checkpointSnapshotProblems(known, [])).toHaveLength(1);
  });

  const figure = (resumedFrom: number, checkpointBefore: number): RestartFigure => ({
    kind: "aux-restart",
    target: "aux",
    at: at(100),
    highestBefore: 120,
    resumedFrom,
    stepsLost: 120 - resumedFrom,
    secondsToSharedStep: 2,
    auxBackSeconds: null,
    checkpointBefore,
    outcome: "resumed",
  });

  it("passes a run that resumed at or after its checkpoints, and fails one that went behind", () => {
    const input = {
      metrics: series([point(0, 1, 10), point(0, 2, 11)]),
      checkpoints: [checkpoint("a", 100, 50)],
      snapshotProblems: [],
      peers: [],
    };
    expect(checkStepsForward({ ...input, figures: [figure(100, 100)] }).pass).toBe(true);
    const behind = checkStepsForward({ ...input, figures: [figure(60, 100)] });
    expect(behind.pass).toBe(false);
    expect(behind.details[0]).toContain("behind the checkpoint of step 100");
  });

  it("fails a resume event behind the latest checkpoint before it", () => {
    const event = {
      kind: "resumed" as const,
      step: 40,
      fromStep: 120,
      timeline: 1,
      checkpointId: null,
      at: new Date(at(200)).toISOString(),
    };
    const result = checkStepsForward({
      metrics: { points: [point(0, 120, 150), point(1, 41, 210)], total: 2, events: [event] },
      checkpoints: [checkpoint("a", 100, 90)],
      snapshotProblems: [],
      figures: [],
      peers: [],
    });
    expect(result.pass).toBe(false);
    expect(result.details.join("\n")).toContain("resumed from step 40");
  });
});

describe("one model", () => {
  const input = (peers: ReturnType<typeof peer>[], sampleTimes: number[]) => ({
    peers,
    sampleTimes,
    auxSplitWarnings: [],
    platformSplitSamples: 0,
  });

  it("passes when the trainers at the top step logged the same digest, a peer behind not compared", () => {
    const peers = [
      peer("peer-1", [step(10, 5, "a"), step(20, 6, "b")]),
      peer("peer-2", [step(10, 5, "a"), step(20, 6, "b")]),
      peer("peer-3", [step(10, 5, "a")]),
    ];
    const result = checkOneModel(input(peers, [at(15), at(25)]));
    expect(result.pass).toBe(true);
    expect(result.summary).toContain("2 with ≥ 2 trainers");
  });

  it("fails when two trainers at the top step logged different digests", () => {
    const peers = [peer("peer-1", [step(10, 5, "a")]), peer("peer-2", [step(11, 5, "c")])];
    const result = checkOneModel(input(peers, [at(15)]));
    expect(result.pass).toBe(false);
    expect(result.details[0]).toContain("step 5");
  });

  it("leaves out a peer that loaded the swarm's state after its own step (a private step dropped)", () => {
    // After an aux restart peer-2 stepped alone at 5 (digest c), then loaded the others' state.
    const dropped = { ...peer("peer-2", [step(10, 5, "c")]), stateLoads: [{ time: at(11), step: 5 }] };
    const peers = [peer("peer-1", [step(10, 5, "a")]), dropped, peer("peer-3", [step(10, 5, "a")])];
    expect(checkOneModel(input(peers, [at(12)])).pass).toBe(true);
    // Healed within PRIVATE_STEP_HEAL_MS: not compared in the moment before the load either.
    expect(checkOneModel(input(peers, [at(10.5)])).pass).toBe(true);
  });

  it("compares a private step until its load when the load comes late or after the peer stepped again", () => {
    const late = at(10) + PRIVATE_STEP_HEAL_MS + 1_000;
    const slow = { ...peer("peer-2", [step(10, 5, "c")]), stateLoads: [{ time: late, step: 5 }] };
    const peers = [peer("peer-1", [step(10, 5, "a")]), slow];
    expect(checkOneModel(input(peers, [at(10.5)])).pass).toBe(false);
    expect(checkOneModel(input(peers, [late + 1])).pass).toBe(true);
    // A load after the peer's next step does not excuse the step before it.
    const onward = {
      ...peer("peer-2", [step(10, 5, "c"), step(10.8, 6, "d")]),
      stateLoads: [{ time: at(11), step: 6 }],
    };
    expect(checkOneModel(input([peer("peer-1", [step(10, 5, "a")]), onward], [at(10.5)])).pass).toBe(false);
  });

  it("leaves out peers with a swarm note, peers not running, and lines after the sample", () => {
    const peers = [
      peer("peer-1", [step(10, 5, "a")]),
      peer("peer-2", [step(10, 5, "c")], {}, [status(9, "refused by the swarm: revoked")]),
      peer("peer-3", [step(10, 5, "d")], { endedAt: at(12) }),
      peer("peer-4", [step(16, 5, "e")]),
    ];
    expect(checkOneModel(input(peers, [at(15)])).pass).toBe(true);
  });
});

describe("credit", () => {
  const board = (samples: number) => ({
    entries: [
      {
        username: "demo-volunteer",
        samples,
        computeSeconds: 1,
        bytesAggregated: 0,
        longestSessionSeconds: 1,
        peers: 3,
        nodeKinds: ["cli" as const],
      },
      {
        username: "demo-organizer",
        samples: 0,
        computeSeconds: 0,
        bytesAggregated: 9,
        longestSessionSeconds: 1,
        peers: 1,
        nodeKinds: ["cli" as const],
      },
    ],
  });
  const peers = [
    peer("peer-1", [step(1, 1, "a"), step(2, 2, "b"), step(3, 3, "c", { shared: false, localSamples: 500 })]),
    peer("peer-2", [step(1, 1, "a", { localSamples: 3000 })]),
  ];

  it("counts the local samples of shared steps only, and passes within 1 %", () => {
    expect(checkCredit(board(5000), peers).pass).toBe(true);
    expect(checkCredit(board(5049), peers).pass).toBe(true);
  });

  it("fails beyond 1 % either way, and when no shared step was logged", () => {
    expect(checkCredit(board(5051), peers).pass).toBe(false);
    expect(checkCredit(board(4900), peers).pass).toBe(false);
    expect(checkCredit(board(0), []).pass).toBe(false);
  });

  it("names the samples the platform never recorded and those of steps taken alone", () => {
    const late = peer("peer-1", [step(1, 1, "a"), step(9, 2, "b", { localSamples: 700, groupSize: 1 })]);
    const details = checkCredit(board(1000), [late], { lastRecordedAt: at(5) }).details.join("\n");
    expect(details).toContain(
      "after the platform's last recorded step (2026-01-01T00:00:05.000Z): 700 samples",
    );
    expect(details).toContain("group of one: 700 samples");
  });

  it("leaves out the shared steps a peer took after the aux dropped it for its revoked token", () => {
    const revoked = peer(
      "peer-1",
      [step(1, 1, "a"), step(2, 2, "b"), step(3, 3, "c", { localSamples: 600 })],
      {
        stop: { reason: "token revoked", at: at(1.5), expectCodes: [10] },
        endedAt: at(4),
        exit: { code: 10, signal: null },
      },
    );
    const drops = [{ time: at(2.5), peerId: "id-peer-1" }];
    const result = checkCredit(board(2000), [revoked], { revokedDrops: drops });
    expect(result.pass).toBe(true);
    expect(result.details.join("\n")).toContain("not credited by design): 600 samples");
    // Without the drop those samples count, and the leaderboard is 23 % short.
    expect(checkCredit(board(2000), [revoked]).pass).toBe(false);
    // A drop of another node, or outside this run, changes nothing.
    expect(checkCredit(board(2000), [revoked], { revokedDrops: [{ time: at(2.5), peerId: "x" }] }).pass).toBe(
      false,
    );
  });

  it("gives a drop logged after a re-token to the incarnation that held the revoked token, not the next one", () => {
    // The old incarnation ended at 2 s; the new one, with the new token, started at 3 s; the aux's
    // poll came at 4 s and dropped the old pass it still held.
    const old = peer("peer-1", [step(1, 1, "a", { localSamples: 500 })], {
      startedAt: at(0),
      endedAt: at(2),
      exit: { code: 10, signal: null },
    });
    const next = peer("peer-1", [step(5, 2, "b", { localSamples: 700 })], { startedAt: at(3) });
    const drops = [{ time: at(4), peerId: "id-peer-1" }];
    const result = checkCredit(board(1200), [old, next], { revokedDrops: drops, revokedAt: [at(1)] });
    expect(result.pass).toBe(true);
    expect(result.details.join("\n")).toContain("not credited by design): 0 samples");
    // Without knowing when the token was revoked the drop would land on the new incarnation.
    expect(checkCredit(board(1200), [old, next], { revokedDrops: drops }).pass).toBe(false);
  });

  it("names the samples of shared steps just before a SIGKILL", () => {
    const killed = peer("peer-3", [step(1, 1, "a"), step(9, 2, "b", { localSamples: 700 })], {
      endedAt: at(10),
      exit: { code: null, signal: "SIGKILL" },
    });
    expect(checkCredit(board(1700), [killed]).details.join("\n")).toContain("SIGKILL: 700 samples");
  });
});

describe("platform log", () => {
  const error = (seconds: number) => ({
    time: at(seconds),
    level: 50,
    text: '{"level":50}',
    file: "platform.0.log",
  });

  it("explains errors within the window after a platform restart", () => {
    const result = checkPlatformLog([error(110)], [chaos("platform-restart", 100)]);
    expect(result.pass).toBe(true);
    expect(result.details[0]).toContain("during platform-restart");
  });

  it("fails on an error outside every action's window", () => {
    const result = checkPlatformLog([error(110), error(500)], [chaos("platform-restart", 100)]);
    expect(result.pass).toBe(false);
    expect(result.summary).toContain("1 unexplained");
    expect(result.details[1]).toContain("UNEXPLAINED");
  });
});

describe("processes", () => {
  it("passes processes that ended as asked or expected", () => {
    const runs = [
      incarnation("peer-1"),
      incarnation("peer-2", {
        exit: { code: null, signal: "SIGKILL" },
        stop: { reason: "chaos: peer-kill", at: at(5) },
      }),
      incarnation("peer-3", {
        exit: { code: 10, signal: null },
        stop: { reason: "token revoked", at: at(5), expectCodes: [10] },
      }),
    ];
    expect(checkProcesses(runs, [chaos("retoken", 5)]).pass).toBe(true);
  });

  it("fails an exit nobody asked for, a wrong code, a forced kill and a failed action", () => {
    const runs = [
      incarnation("peer-1", { stop: null, exit: { code: 1, signal: null } }),
      incarnation("peer-2", {
        exit: { code: 1, signal: null },
        stop: { reason: "token revoked", at: at(5), expectCodes: [10] },
      }),
      incarnation("peer-3", { forced: "did not end within 45 s of SIGINT" }),
    ];
    const result = checkProcesses(runs, [chaos("retoken", 5, { failure: "sign-in failed" })]);
    expect(result.pass).toBe(false);
    expect(result.details).toHaveLength(4);
  });
});

describe("recovery", () => {
  const figure = (outcome: RestartFigure["outcome"], seconds: number | null): RestartFigure => ({
    kind: "peer-kill",
    target: "peer-1",
    at: at(10),
    highestBefore: 5,
    resumedFrom: 5,
    stepsLost: 0,
    secondsToSharedStep: seconds,
    auxBackSeconds: null,
    checkpointBefore: null,
    outcome,
  });

  it("passes when every restart was followed by a shared step or stopped too soon to tell", () => {
    const result = checkRecovery([figure("resumed", 3), figure("resumed", 5), figure("interrupted", null)]);
    expect(result.pass).toBe(true);
    expect(result.summary).toContain("median 4.0 s");
  });

  it("fails a restart never followed by a shared step", () => {
    expect(checkRecovery([figure("resumed", 3), figure("never", null)]).pass).toBe(false);
  });
});

describe("last step recorded", () => {
  it("passes when the platform recorded the peers' last step, and fails on a gap", () => {
    expect(checkRecorded(155, 155).pass).toBe(true);
    expect(checkRecorded(null, null).pass).toBe(true);
    const gap = checkRecorded(155, 73);
    expect(gap.pass).toBe(false);
    expect(gap.details[0]).toContain("steps 74 to 155");
  });
});

describe("step samples", () => {
  const withSamples = (n: number, seconds: number, samples: number) => ({ ...point(0, n, seconds), samples });

  it("passes when the samples the platform recorded for each step are those the peers' rounds averaged", () => {
    const peers = [
      peer("peer-1", [step(10, 1, "a", { samples: 4096 }), step(20, 2, "b", { samples: 3000 })]),
      peer("peer-2", [step(10, 1, "a", { samples: 4096 }), step(20, 2, "b", { samples: 3000 })]),
    ];
    const result = checkStepSamples(
      [withSamples(1, 12, 4096), withSamples(2, 22, 3000), point(0, 3, 32)],
      peers,
    );
    expect(result.pass).toBe(true);
    expect(result.summary).toContain(
      "3 points, 2 with samples; 2 compared with the peers' step lines: 2 agree, 0 disagree",
    );
  });

  it("fails when a recorded step's samples are not what any peer's round put into it", () => {
    const peers = [peer("peer-1", [step(10, 1, "a", { samples: 4096 })])];
    const result = checkStepSamples([withSamples(1, 12, 40_960)], peers);
    expect(result.pass).toBe(false);
    expect(result.details[0]).toContain("the platform 40960, the peers' lines 4096");
  });

  it("matches a step with the peers' line of the same timeline, not an older one of the same number", () => {
    // Step 1 was taken before a resume (4096 samples) and again after it (2048): the point recorded
    // after the resume is the second one's.
    const peers = [
      peer("peer-1", [step(10, 1, "a", { samples: 4096 }), step(200, 1, "c", { samples: 2048 })]),
    ];
    expect(checkStepSamples([withSamples(1, 202, 2048)], peers).pass).toBe(true);
    expect(checkStepSamples([withSamples(1, 202, 4096)], peers).pass).toBe(false);
  });

  it("fails when no recorded step carries samples though the peers took shared steps", () => {
    const result = checkStepSamples([point(0, 1, 12)], [peer("peer-1", [step(10, 1, "a")])]);
    expect(result.pass).toBe(false);
    expect(result.details[0]).toContain("no recorded step carries samples");
  });
});
