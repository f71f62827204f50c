import type { EpochProgressView, GlobalProgress, LocalProgress } from "@barnraise/swarm";
import { describe, expect, it } from "vitest";
import { LossReportingProgress, type ProgressSink } from "../../src/training/loss-reporting-progress.ts";

/** The optimizer's progress port on a peer: what it passes through to the swarm's tracker. */

function sink(states?: ReadonlyMap<string, readonly string[]>): ProgressSink & { reports: LocalProgress[] } {
  const reports: LocalProgress[] = [];
  const view: GlobalProgress = { epoch: 3, samplesAccumulated: 0, targetBatchSize: 64, etaSeconds: 1 };
  return {
    reports,
    report: (progress) => reports.push(progress),
    global: () => view,
    at: (): EpochProgressView => ({ ...view, peersAtEpoch: 1 }),
    ...(states === undefined ? {} : { sharedStates: () => states }),
  };
}

describe("LossReportingProgress", () => {
  it("hands the optimizer the swarm's state digests at a step, so a peer apart takes the swarm's over", () => {
    const states = new Map([["0123456789abcdef", ["12D3KooWa", "12D3KooWb"]]]);
    expect(new LossReportingProgress(sink(states)).sharedStates(3)).toBe(states);
    expect(new LossReportingProgress(sink()).sharedStates(3).size).toBe(0);
  });

  it("publishes the state fingerprint and solo steps the optimizer reports", () => {
    const target = sink();
    const port = new LossReportingProgress(target);
    port.report({
      epoch: 3,
      samplesAccumulated: 8,
      samplesPerSecond: 2,
      stateHash: { epoch: 3, digest: "0123456789abcdef" },
      soloSteps: 2,
    });
    expect(target.reports.at(-1)).toMatchObject({
      stateHash: { epoch: 3, digest: "0123456789abcdef" },
      soloSteps: 2,
    });
  });
});
