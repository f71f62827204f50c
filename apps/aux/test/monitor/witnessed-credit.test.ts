import { afterEach, describe, expect, it } from "vitest";
import type { ExperimentConfigInput } from "@barnraise/protocol";
import type { Swarm } from "@barnraise/swarm";
import { at } from "../../../../packages/swarm/test/support/at.ts";
import { eventually, TestAuthority } from "../../../../packages/swarm/test/support/swarm-fixtures.ts";
import { startSwarm, testConfig } from "../../../../packages/swarm/test/support/swarm-harness.ts";
import { RoundWitness } from "../../src/monitor/round-witness.ts";
import { StepAggregator } from "../../src/monitor/step-aggregator.ts";

/**
 * A volunteer with a valid trainer pass averages honestly (its declared weight is what its records
 * earned) but claims in its records that each round took 20 % more of its samples than it sent:
 * within what the records' own plausibility allows (a total may outgrow the announced samples by
 * 25 %), so only a witness of the rounds can tell. Two honest trainers and the organizer's aux on a
 * real swarm average for a few epochs; the aux's step aggregator, as the aux runs it (its witness
 * fed by the aux's own reductions), credits each trainer what the aux accepted of its samples and
 * names the claimant with the evidence.
 */

const HONEST = 2;
const SAMPLES = 400;
const EPOCHS = 4;
const INFLATION = 1.2;
const DIMENSION = 64;

const swarms: Swarm[] = [];
afterEach(async () => {
  await Promise.all(swarms.splice(0).map((swarm) => swarm.stop().catch(() => undefined)));
});

describe("credit against what the aux witnessed (real swarm)", () => {
  // A browser tab averages as a client (it dials the others and reduces no part): the aux credits
  // and witnesses it as it does a CLI peer.
  it.each([
    { claimant: "a full node", mode: "node" as const },
    { claimant: "a client, as a browser tab is", mode: "client" as const },
  ])(
    "credits the claimant ($claimant) what it put into the rounds, and the honest trainers all they claimed",
    async ({ mode }) => {
      const authority = new TestAuthority();
      const config: ExperimentConfigInput = {
        ...testConfig,
        training: { targetBatchSize: (HONEST + 1) * SAMPLES },
        averaging: { ...testConfig.averaging, loadBalancing: false, aggregation: "mean" },
      };
      const aux = await startSwarm(authority, { config, mode: "aux" });
      swarms.push(aux);
      const bootstrap = aux.node.multiaddrs();
      const trainers: Swarm[] = [];
      for (let k = 0; k <= HONEST; k++) {
        const trainer = await startSwarm(authority, {
          config,
          bootstrap,
          username: k === HONEST ? "mallory" : `honest-${k}`,
          ...(k === HONEST ? { mode } : {}),
        });
        swarms.push(trainer);
        trainers.push(trainer);
      }
      const claimant = at(trainers, HONEST);
      expect(claimant.node.mode).toBe(mode);
      const witness = new RoundWitness();
      const stopWitnessing = aux.averager.observeContributions((contribution) => {
        witness.observe(contribution);
      });
      const aggregator = new StepAggregator({ ttlMs: 60_000, graceMs: 0, witness });
      aux.progress.on("update", (update) => {
        aggregator.observe(update);
      });
      await eventually(
        () => trainers.every((trainer) => trainer.node.members().length === HONEST + 1),
        "meshed",
        30_000,
      );

      const totals = trainers.map(() => 0);
      const publish = async (epoch: number) => {
        trainers.forEach((trainer, k) => {
          trainer.progress.report({
            epoch,
            samplesAccumulated: SAMPLES,
            samplesPerSecond: SAMPLES,
            samplesTotal: Math.round(at(totals, k)),
            lossSum: 1,
            minibatches: 1,
            ...(epoch === 0 ? {} : { round: { epoch: epoch - 1, bytesSent: 1 } }),
          });
        });
        aux.progress.report({ epoch, averagingEpoch: epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
        await Promise.all(swarms.map((swarm) => swarm.progress.pushNow()));
        await eventually(
          () =>
            trainers.every((trainer) =>
              aux.progress
                .records()
                .some((entry) => entry.peerId === trainer.node.peerId && entry.record.epoch === epoch),
            ) &&
            trainers.every(
              (trainer) =>
                trainer.progress.records().filter((entry) => entry.record.epoch === epoch).length ===
                HONEST + 1,
            ),
          `everyone at epoch ${epoch}`,
          30_000,
        );
      };
      /** Per step, the samples the trainers' rounds put into it, as each trainer saw its round end. */
      const averaged = new Map<number, number[]>();
      for (let epoch = 0; epoch < EPOCHS; epoch++) {
        await publish(epoch);
        const vector = () => Float32Array.from({ length: DIMENSION }, (_, i) => Math.sin(epoch + i));
        const [helped, ...outcomes] = await Promise.all([
          aux.averager.average(epoch, new Float32Array(DIMENSION), 0),
          ...trainers.map((trainer) => trainer.averager.average(epoch, vector(), SAMPLES)),
        ]);
        expect(helped.groupSize).toBe(HONEST + 2);
        averaged.set(
          epoch + 1,
          outcomes.map((outcome) => outcome.totalWeight),
        );
        trainers.forEach((_, k) => {
          totals[k] = at(totals, k) + (k === HONEST ? INFLATION : 1) * SAMPLES;
        });
      }
      await publish(EPOCHS);
      stopWitnessing();

      // The steps the aux reports hold the samples the trainers' rounds averaged: two views of one fact.
      const reported = aggregator.collect().filter((step) => step.step <= EPOCHS);
      expect(reported.map((step) => step.step)).toEqual([1, 2, 3, 4]);
      for (const step of reported) {
        for (const totalWeight of averaged.get(step.step) ?? []) expect(step.samples).toBe(totalWeight);
        expect(step.samples).toBe((HONEST + 1) * SAMPLES);
      }

      const credited = new Map(aggregator.contributions().map((peer) => [peer.peerId, peer.samples]));
      for (const trainer of trainers.slice(0, HONEST))
        expect(credited.get(trainer.node.peerId)).toBe(EPOCHS * SAMPLES);
      // Its records claimed 20 % more; the aux accepted SAMPLES of its samples in each round.
      expect(credited.get(claimant.node.peerId)).toBe(EPOCHS * SAMPLES);
      const shortfalls = aggregator.takeShortfalls();
      expect(shortfalls.length).toBeGreaterThan(0);
      for (const shortfall of shortfalls) expect(shortfall.peerId).toBe(claimant.node.peerId);
      expect(aggregator.creditTally()).toEqual({
        witnessed: (HONEST + 1) * EPOCHS * SAMPLES,
        unwitnessed: 0,
        cut: Math.round(EPOCHS * SAMPLES * INFLATION) - EPOCHS * SAMPLES,
      });
    },
    120_000,
  );
});
