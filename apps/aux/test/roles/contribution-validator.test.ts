import type { ObservedContribution } from "@barnraise/swarm";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import {
  ContributionValidator,
  RELATIVE_TOLERANCE,
  TYPICAL_CHANGE_TOLERANCE,
  median,
  type ContributionFlag,
  type ContributionValidatorOptions,
  type LossScorer,
  type ValidationParameters,
} from "../../src/roles/contribution-validator.ts";

/**
 * The validator behind its ports: a quadratic "held-out loss" L(θ) = 1 + mean((θ − θ*)²) stands in
 * for the model, contributions are fed chunk by chunk as the reducer hands them over, and flags are
 * recorded instead of posted.
 */

const LENGTH = 120;
/** The aux's part of the vector, in chunks of 32. */
const PART = { start: 10, end: 110 };
const CHUNK = 32;
const OPTIMUM = Float32Array.from({ length: LENGTH }, (_, i) => Math.sin(i));
const THETA = Float32Array.from({ length: LENGTH }, (_, i) => Math.sin(i) + 0.5 * Math.cos(3 * i));

function quadraticLoss(parameters: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < LENGTH; i++) sum += ((parameters[i] ?? 0) - (OPTIMUM[i] ?? 0)) ** 2;
  return 1 + sum / LENGTH;
}

/** An honest peer's gradient on the part: towards the optimum, with a little noise of its own. */
function honest(seed: number): Float32Array {
  return Float32Array.from({ length: PART.end - PART.start }, (_, k) => {
    const i = PART.start + k;
    return (2 * ((THETA[i] ?? 0) - (OPTIMUM[i] ?? 0))) / LENGTH + 0.002 * Math.sin(seed * 7.1 + k);
  });
}

function scaled(values: Float32Array, factor: number): Float32Array {
  return values.map((value) => value * factor);
}

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

function setup(options: Partial<ContributionValidatorOptions> & { scorer?: Partial<LossScorer> } = {}) {
  const logger = pino({ level: "silent" });
  const warn = vi.spyOn(logger, "warn");
  const flags: ContributionFlag[] = [];
  const losses: Float32Array[] = [];
  const clock = { now: 1_000_000 };
  const stop = new AbortController();
  const state: { current: ValidationParameters | null } = {
    current: { step: 4, generation: 0, parameters: THETA },
  };
  const scorer: LossScorer = {
    loss: (parameters) => {
      losses.push(parameters.slice());
      return Promise.resolve(quadraticLoss(parameters));
    },
    dispose: () => undefined,
    ...options.scorer,
  };
  const validator = new ContributionValidator({
    logger,
    signal: stop.signal,
    parameters: () => state.current,
    generation: () => 0,
    openScorer: () => Promise.resolve(scorer),
    report: (flag) => {
      flags.push(flag);
      return Promise.resolve();
    },
    // The median sender steps lr·√length (lr 0.01): on this quadratic the loss stays near-linear.
    stepScale: (partLength: number, medianNorm: number) => (0.01 * Math.sqrt(partLength)) / medianNorm,
    batches: 4,
    now: () => clock.now,
    random: () => 0.5,
    ...options,
  });
  return { validator, flags, warn, losses, clock, stop, state };
}

/** Feeds one round's contributions chunk by chunk, in member order per chunk as the reducer does. */
function feed(
  validator: ContributionValidator,
  epoch: number,
  senders: ReadonlyMap<string, Float32Array>,
  groupId = `group-${epoch}`,
): void {
  for (let offset = 0; offset < PART.end - PART.start; offset += CHUNK) {
    for (const [peerId, values] of senders) {
      const contribution: ObservedContribution = {
        epoch,
        groupId,
        peerId,
        weight: 64,
        part: PART,
        start: PART.start + offset,
        values: values.subarray(offset, Math.min(offset + CHUNK, values.length)),
      };
      validator.observe(contribution);
    }
  }
}

async function round(
  validator: ContributionValidator,
  epoch: number,
  senders: ReadonlyMap<string, Float32Array>,
): Promise<void> {
  feed(validator, epoch, senders);
  validator.finish(epoch);
  await validator.idle();
}

const honestRound = (epoch: number, extra: Record<string, Float32Array> = {}) =>
  new Map<string, Float32Array>([
    ["honest-a", honest(epoch * 3 + 1)],
    ["honest-b", honest(epoch * 3 + 2)],
    ["honest-c", honest(epoch * 3 + 3)],
    ...Object.entries(extra),
  ]);

describe("ContributionValidator", () => {
  it("flags a peer whose gradients are sign-flipped and 1,000 times larger, after two rounds, with the evidence", async () => {
    const { validator, flags, warn } = setup();
    await round(validator, 7, honestRound(7, { attacker: scaled(honest(70), -1000) }));
    expect(validator.flagged()).toEqual([]);
    expect(flags).toEqual([]);
    await round(validator, 8, honestRound(8, { attacker: scaled(honest(80), -1000) }));
    expect(validator.roundsScored).toBe(2);
    expect(validator.flagged()).toEqual(["attacker"]);
    expect(flags).toHaveLength(1);
    const [flag] = flags;
    expect(flag).toMatchObject({
      peerId: "attacker",
      epoch: 8,
      generation: 0,
      firstHurtEpoch: 7,
      hurtSamples: 2,
      recentSamples: 2,
      baselineLoss: quadraticLoss(THETA),
    });
    expect(flag?.lossAfter ?? 0).toBeGreaterThan((flag?.baselineLoss ?? Infinity) * 10);
    expect(flag?.medianDelta ?? 0).toBeLessThan(0);
    expect(flag?.normRatio ?? 0).toBeGreaterThan(900);
    expect(warn).toHaveBeenCalledWith(
      expect.objectContaining({ peer: "attacker", hurtSamples: 2 }),
      expect.stringMatching(
        /^flagged attacker: its contributions raised the held-out loss in 2 of its last 2 samples/,
      ),
    );
  });

  it("flags a gradient 1,000 times too large (it overshoots), and never an honest peer", async () => {
    const { validator, flags } = setup();
    for (let epoch = 0; epoch < 6; epoch++) {
      await round(validator, epoch, honestRound(epoch, { loud: scaled(honest(epoch + 50), 1000) }));
    }
    expect(validator.flagged()).toEqual(["loud"]);
    expect(new Set(flags.map((flag) => flag.peerId))).toEqual(new Set(["loud"]));
  });

  it("flags a sign-flipped gradient ×1,000 on a model far from any minimum, where its rise is a small share of the loss", async () => {
    // A state wrecked before the aux saw a round: every element 120·cos away from the optimum, a loss
    // of about 7,000. An honest step lowers it by about 1.5, the attacker's raises it by about 1,500:
    // under 30 % of the loss, but a thousand times what honest steps do.
    const wrecked = Float32Array.from({ length: LENGTH }, (_, i) => Math.sin(i) + 120 * Math.cos(3 * i));
    const towardsOptimum = (seed: number) =>
      Float32Array.from({ length: PART.end - PART.start }, (_, k) => {
        const i = PART.start + k;
        return (2 * ((wrecked[i] ?? 0) - (OPTIMUM[i] ?? 0))) / LENGTH + 0.05 * Math.sin(seed * 7.1 + k);
      });
    const { validator, flags, state } = setup();
    state.current = { step: 900, generation: 0, parameters: wrecked };
    const baseline = quadraticLoss(wrecked);
    for (let epoch = 0; epoch < 2; epoch++) {
      await round(
        validator,
        epoch,
        new Map([
          ["honest-a", towardsOptimum(3 * epoch + 1)],
          ["honest-b", towardsOptimum(3 * epoch + 2)],
          ["attacker", scaled(towardsOptimum(3 * epoch + 3), -1000)],
        ]),
      );
    }
    expect(validator.roundsScored).toBe(2);
    expect(validator.flagged()).toEqual(["attacker"]);
    const [flag] = flags;
    expect(flag?.baselineLoss).toBe(baseline);
    const rise = (flag?.lossAfter ?? 0) - baseline;
    expect(rise).toBeGreaterThan(0);
    expect(rise).toBeLessThan(RELATIVE_TOLERANCE * baseline);
    expect(-(flag?.medianDelta ?? 0) * TYPICAL_CHANGE_TOLERANCE).toBeLessThan(rise);
  });

  it("does not flag a peer whose step climbs a few times what the others' descend", async () => {
    // Late in training honest steps barely descend, and a noisy minibatch can climb by a few times
    // what the others fall: noise, not an attack.
    const { validator, flags } = setup();
    for (let epoch = 0; epoch < 6; epoch++) {
      const a = honest(3 * epoch + 1);
      const b = scaled(honest(3 * epoch + 2), 0.5);
      // A third peer whose step climbs: its gradient points away, a few times as long as the others'.
      const c = scaled(honest(3 * epoch + 3), -3);
      await round(
        validator,
        epoch,
        new Map([
          ["honest-a", a],
          ["honest-b", b],
          ["noisy", c],
        ]),
      );
    }
    expect(validator.roundsScored).toBe(6);
    expect(flags).toEqual([]);
  });

  it("leaves honest rounds alone: each honest step lowers the loss", async () => {
    const { validator, flags, losses } = setup();
    for (let epoch = 0; epoch < 5; epoch++) await round(validator, epoch, honestRound(epoch));
    expect(validator.roundsScored).toBe(5);
    expect(validator.flagged()).toEqual([]);
    expect(flags).toEqual([]);
    // θ and the three senders' steps, on the fixed subset the config asks for.
    expect(losses).toHaveLength(5 * 4);
    // Only the part moves: the step leaves every other element of θ as it was.
    const stepped = losses[1] ?? new Float32Array();
    expect(Array.from(stepped.subarray(0, PART.start))).toEqual(Array.from(THETA.subarray(0, PART.start)));
    expect(Array.from(stepped.subarray(PART.end))).toEqual(Array.from(THETA.subarray(PART.end)));
    expect(quadraticLoss(stepped)).toBeLessThan(quadraticLoss(THETA));
  });

  it("shortens a step too long for the state until the median one descends, then judges", async () => {
    let measured = 0;
    const { validator, flags } = setup({
      // 256 times the step that stays near-linear: every honest step overshoots the optimum at first.
      stepScale: (partLength, medianNorm) => (256 * 0.01 * Math.sqrt(partLength)) / medianNorm,
      scorer: {
        loss: (parameters) => {
          measured += 1;
          return Promise.resolve(quadraticLoss(parameters));
        },
      },
    });
    await round(validator, 1, honestRound(1, { attacker: scaled(honest(10), -1000) }));
    await round(validator, 2, honestRound(2, { attacker: scaled(honest(20), -1000) }));
    expect(validator.roundsScored).toBe(2);
    expect(flags.map((flag) => flag.peerId)).toEqual(["attacker"]);
    // θ, then the four senders at each length tried: more than one length per round.
    expect(measured).toBeGreaterThan(2 * (1 + 4));
    expect((measured - 2) % 4).toBe(0);
  });

  it("does not judge a round whose median step never lowers the loss", async () => {
    const { validator, flags } = setup({
      // Any move away from θ raises this loss: no step descends, however short.
      scorer: {
        loss: (parameters) => {
          let distance = 0;
          for (let i = 0; i < LENGTH; i++) distance += Math.abs((parameters[i] ?? 0) - (THETA[i] ?? 0));
          return Promise.resolve(1 + distance);
        },
      },
    });
    for (let epoch = 0; epoch < 3; epoch++) {
      await round(validator, epoch, honestRound(epoch, { attacker: scaled(honest(epoch), -1000) }));
    }
    expect(validator.roundsScored).toBe(0);
    expect(validator.flagged()).toEqual([]);
    expect(flags).toEqual([]);
  });

  it("unflags a peer once two of its last three samples help again", async () => {
    const { validator } = setup();
    await round(validator, 1, honestRound(1, { odd: scaled(honest(10), -1000) }));
    await round(validator, 2, honestRound(2, { odd: scaled(honest(20), -1000) }));
    expect(validator.flagged()).toEqual(["odd"]);
    await round(validator, 3, honestRound(3, { odd: honest(30) }));
    expect(validator.flagged()).toEqual(["odd"]);
    await round(validator, 4, honestRound(4, { odd: honest(40) }));
    expect(validator.flagged()).toEqual([]);
  });

  it("scores no round with fewer than three complete contributions, and drops incomplete senders", async () => {
    const { validator, losses } = setup();
    await round(
      validator,
      1,
      new Map([
        ["honest-a", honest(1)],
        ["attacker", scaled(honest(2), -1000)],
      ]),
    );
    expect(losses).toHaveLength(0);
    // Three senders, one of which stopped after its first chunk (excluded from the round).
    feed(validator, 2, honestRound(2, { attacker: scaled(honest(3), -1000) }));
    validator.observe({
      epoch: 2,
      groupId: "group-2",
      peerId: "cut-off",
      weight: 1,
      part: PART,
      start: PART.start,
      values: honest(4).subarray(0, CHUNK),
    });
    validator.finish(2);
    await validator.idle();
    // θ and four complete senders: the cut-off one is left out.
    expect(losses).toHaveLength(5);
  });

  it("says once a minute what became of the rounds it was given: judged, or why not", async () => {
    const logger = pino({ level: "silent" });
    const info = vi.spyOn(logger, "info");
    const summarized = setup({ logger });
    const rounds = [
      // Judged.
      () => round(summarized.validator, 1, honestRound(1)),
      // Two senders only.
      () =>
        round(
          summarized.validator,
          2,
          new Map([
            ["honest-a", honest(1)],
            ["honest-b", honest(2)],
          ]),
        ),
      // Nothing of the round reached this aux.
      async () => {
        summarized.validator.finish(3);
        await summarized.validator.idle();
      },
      // No state of the round's generation.
      async () => {
        summarized.state.current = null;
        await round(summarized.validator, 4, honestRound(4));
        summarized.state.current = { step: 4, generation: 0, parameters: THETA };
      },
    ];
    for (const play of rounds) {
      await play();
      summarized.clock.now += 10_000;
    }
    expect(Object.fromEntries(summarized.validator.outcomes())).toEqual({
      judged: 1,
      "too-few-senders": 1,
      "no-contributions": 1,
      "no-state": 1,
    });
    expect(info.mock.calls.filter(([, message]) => String(message).startsWith("validator:"))).toHaveLength(0);
    // A minute after the first outcome, the next one brings the summary, and the count starts again.
    summarized.clock.now += 30_000;
    await round(summarized.validator, 5, honestRound(5));
    const summaries = info.mock.calls.filter(([, message]) => String(message).startsWith("validator:"));
    expect(summaries).toHaveLength(1);
    expect(summaries[0]?.[1]).toBe(
      "validator: judged 2 of the 5 rounds it helped in the last 70 s " +
        "(not judged: 1 too-few-senders, 1 no-contributions, 1 no-state)",
    );
    expect(summaries[0]?.[0]).toMatchObject({ outcomes: { judged: 2, "no-state": 1 }, flagged: 0 });
    expect(summarized.validator.outcomes().size).toBe(0);
  });

  it("drops what it collected of a failed round and of a round retried in another group", async () => {
    const { validator, losses } = setup();
    feed(validator, 5, honestRound(5));
    validator.discard();
    validator.finish(5);
    await validator.idle();
    expect(losses).toHaveLength(0);
    feed(validator, 6, honestRound(6, { attacker: scaled(honest(6), -1000) }), "first-try");
    feed(validator, 6, honestRound(6), "retry");
    validator.finish(6);
    await validator.idle();
    expect(losses).toHaveLength(4);
  });

  it("never holds the averaging up: while it scores, one finished round waits and a newer one replaces it", async () => {
    const held = gate();
    let scored = 0;
    const { validator } = setup({
      scorer: {
        loss: async (parameters) => {
          await held.promise;
          scored += 1;
          return quadraticLoss(parameters);
        },
      },
    });
    feed(validator, 1, honestRound(1));
    validator.finish(1);
    expect(validator.busy).toBe(true);
    // Two more rounds finish while the first is scored (four senders, then five): only the newest is kept.
    feed(validator, 2, honestRound(2, { d: honest(20) }));
    validator.finish(2);
    feed(validator, 3, honestRound(3, { d: honest(30), e: honest(31) }));
    validator.finish(3);
    held.open();
    await validator.idle();
    expect(validator.roundsScored).toBe(2);
    // θ and three senders, then θ and five.
    expect(scored).toBe(4 + 6);
  });

  it("samples at most the configured number of senders in a round", async () => {
    const losses: number[] = [];
    const { validator } = setup({
      maxSendersPerRound: 4,
      random: () => 0.99,
      scorer: {
        loss: (parameters) => {
          losses.push(1);
          return Promise.resolve(quadraticLoss(parameters));
        },
      },
    });
    const senders = new Map(Array.from({ length: 10 }, (_, i) => [`peer-${i}`, honest(i)] as const));
    await round(validator, 1, senders);
    expect(losses).toHaveLength(1 + 4);
  });

  it("scores nothing without a state of the round's generation", async () => {
    const { validator, losses, state } = setup();
    state.current = null;
    await round(validator, 1, honestRound(1));
    state.current = { step: 0, generation: 1, parameters: THETA };
    await round(validator, 2, honestRound(2));
    expect(losses).toHaveLength(0);
    expect(validator.roundsScored).toBe(0);
  });

  it("counts a step that makes the loss infinite as hurting", async () => {
    const { validator, flags } = setup({
      scorer: {
        loss: (parameters) => {
          const loss = quadraticLoss(parameters);
          return Promise.resolve(loss > 50 ? Number.POSITIVE_INFINITY : loss);
        },
      },
    });
    await round(validator, 1, honestRound(1, { attacker: scaled(honest(1), -1000) }));
    await round(validator, 2, honestRound(2, { attacker: scaled(honest(2), -1000) }));
    expect(flags).toMatchObject([{ peerId: "attacker", lossAfter: null }]);
  });

  it("reports a peer that keeps hurting again only after reportEveryMs, and again sooner when a report failed", async () => {
    let failNext = false;
    const reported: number[] = [];
    const { validator, clock } = setup({
      reportEveryMs: 30_000,
      report: (flag) => {
        if (failNext) {
          failNext = false;
          return Promise.reject(new Error("the platform is down"));
        }
        reported.push(flag.epoch);
        return Promise.resolve();
      },
    });
    const attack = (epoch: number) =>
      round(validator, epoch, honestRound(epoch, { attacker: scaled(honest(epoch), -1000) }));
    await attack(1);
    failNext = true;
    await attack(2);
    await attack(3);
    clock.now += 10_000;
    await attack(4);
    clock.now += 30_000;
    await attack(5);
    expect(reported).toEqual([3, 5]);
  });

  it("lets a scorer error pass as a warning and goes on with the next round", async () => {
    let calls = 0;
    const { validator, warn } = setup({
      scorer: {
        loss: (parameters) =>
          ++calls === 1
            ? Promise.reject(new Error("dataset gone"))
            : Promise.resolve(quadraticLoss(parameters)),
      },
    });
    await round(validator, 1, honestRound(1));
    expect(warn).toHaveBeenCalledWith(
      expect.objectContaining({ epoch: 1 }),
      expect.stringMatching(/could not validate the contributions of epoch 1: dataset gone/),
    );
    await round(validator, 2, honestRound(2));
    expect(validator.roundsScored).toBe(1);
  });
});

describe("median", () => {
  it("takes the middle value, or the mean of the middle two, and copes with infinities", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([1, Infinity, Infinity, 2])).toBe(Infinity);
    expect(median([])).toBeNaN();
  });
});
