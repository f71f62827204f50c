import { join } from "node:path";
import { BackgroundTasks } from "./background-tasks.ts";
import { LivenessReporter } from "./monitor/liveness-reporter.ts";
import { MetricsPoster } from "./monitor/metrics-poster.ts";
import { ResumeReporter } from "./monitor/resume-reporter.ts";
import { AddressRegistrar } from "./roles/address-registrar.ts";
import { downloadState } from "./roles/download-state.ts";
import { ModelSizeLearner } from "./roles/model-size-learner.ts";
import { followRollbacks } from "./roles/rollback-follower.ts";
import { StateHolder } from "./roles/state-holder.ts";
import {
  abortableSleep,
  contributionStepScale,
  type JoinedExperiment,
  type NodeSession,
} from "@barnraise/swarm";
import { ResumeWatch } from "./monitor/resume-watch.ts";
import { CreditLog } from "./monitor/credit-log.ts";
import { ImplausibleRecords } from "./monitor/implausible-records.ts";
import { RoundWitness } from "./monitor/round-witness.ts";
import { SplitWatch } from "./monitor/split-watch.ts";
import { StepAggregator } from "./monitor/step-aggregator.ts";
import { AuxPlatformClient, PlatformRequestError } from "./platform-client.ts";
import { AveragingHelper } from "./roles/averaging-helper.ts";
import { CheckpointEvaluator } from "./roles/checkpoint-evaluator.ts";
import { Checkpointer } from "./roles/checkpointer.ts";
import { ContributionValidator } from "./roles/contribution-validator.ts";
import { openHeldOutScorer } from "./roles/held-out-scorer.ts";
import { SharedScorer } from "./roles/shared-scorer.ts";
import type { AuxRunOptions } from "./aux-run-options.ts";

/** How often the roles look at the swarm. */
const TICK_MS = 250;
/**
 * Test-split batches the validator measures each loss on: 512 rows of a classifier (128 a batch),
 * 4,096 tokens of a language model. A round of n sampled senders costs n + 1 such passes.
 */
const VALIDATION_BATCHES = 4;

export interface RolesContext {
  readonly options: AuxRunOptions;
  readonly joined: JoinedExperiment;
  /** The aux's node in the swarm (its swarm, the platform's run control, refusals). */
  readonly session: NodeSession;
  readonly client: AuxPlatformClient;
  readonly addresses: readonly string[];
  readonly signal: AbortSignal;
  /** Where the swarm finds the state this aux serves. */
  readonly served: { holder?: StateHolder };
}

/** What the roles that score parameters (checkpoint evaluator, contribution validator) share. */
interface ScoringContext extends RolesContext {
  /** One held-out model for both, built on first use (TF.js is only imported then). */
  readonly scorer: SharedScorer;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
  readonly holder: StateHolder;
}

/** The aux's roles, each a small service the loop ticks. */
interface Roles {
  readonly aggregator: StepAggregator;
  readonly implausible: ImplausibleRecords;
  readonly helper: AveragingHelper;
  readonly holder: StateHolder;
  readonly checkpointer: Checkpointer;
  readonly registrar: AddressRegistrar;
  readonly liveness: LivenessReporter;
  readonly resume: ResumeReporter;
  readonly poster: MetricsPoster;
  readonly creditLog: CreditLog;
  readonly sizeLearner: ModelSizeLearner | undefined;
  /** Unsubscribes the roles from the swarm. */
  readonly unsubscribe: () => void;
  /** Closes the scorers. */
  readonly close: () => Promise<void>;
}

/** The roles, wired together, and one loop that ticks them every TICK_MS until the aux stops. */
export async function runRoles(context: RolesContext): Promise<void> {
  const { options, session, signal } = context;
  const { swarm } = session;
  const background = new BackgroundTasks(options.logger, signal);
  const roles = createRoles(context, background);
  const startedAt = Date.now();
  // A call, so that the compiler does not assume the signal unchanged across awaits.
  const stopped = () => signal.aborted;
  try {
    while (!stopped()) {
      const now = Date.now();
      await roles.registrar.tick(now, signal);
      if (stopped()) break;
      roles.holder.tick(now, roles.helper.busy, signal, background);
      roles.liveness.tick(now, signal, background);
      await roles.resume.tick(now, signal);
      if (stopped()) break;
      roles.aggregator.setOwnContribution({
        peerId: swarm.peerId,
        // Its own session, so that what each run of the aux reduced is credited, not the largest.
        session: session.id,
        samples: 0,
        computeSeconds: 0,
        bytesAggregated: swarm.averager.bytesAggregated,
        sessionSeconds: (now - startedAt) / 1000,
      });
      roles.poster.add(roles.aggregator.collect());
      roles.creditLog.report(roles.aggregator, roles.implausible, now);
      await roles.poster.post(now, signal);
      if (stopped()) break;
      const step = roles.aggregator.currentStep();
      if (roles.checkpointer.due(step)) {
        background.run(roles.checkpointer.maybeCheckpoint(step, roles.aggregator.latestLoss(), signal));
      }
      roles.sizeLearner?.tick(step, roles.aggregator.generation, signal, background);
      if (options.helpAveraging) background.run(roles.helper.maybeHelp(signal));
      // Woken early by a stop; the loop condition then ends it.
      await abortableSleep(TICK_MS, signal).catch(() => undefined);
    }
  } finally {
    roles.unsubscribe();
    await background.settle();
    await roles.close();
  }
}

/** What the aux monitors of the swarm, and what it posts of it. */
interface Monitor {
  readonly aggregator: StepAggregator;
  /** The weights this aux accepts in the rounds it helps: the trainers' credit is held against them. */
  readonly witness: RoundWitness | undefined;
  /** One run, one model: the trainers' state digests at one step must agree. */
  readonly splits: SplitWatch;
  /** Trainers whose records claim what none could: the manage page flags them with the reason. */
  readonly implausible: ImplausibleRecords;
  readonly watch: ResumeWatch;
  readonly poster: MetricsPoster;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
}

function createMonitor(context: RolesContext): Monitor {
  const { options, client } = context;
  const witness = options.helpAveraging ? new RoundWitness() : undefined;
  const aggregator = new StepAggregator({ ttlMs: 5_000, graceMs: 2_500, ...(witness && { witness }) });
  const generation = () => aggregator.generation;
  const watch = new ResumeWatch();
  return {
    aggregator,
    witness,
    splits: new SplitWatch({ ttlMs: 5_000 }),
    implausible: new ImplausibleRecords(),
    watch,
    poster: new MetricsPoster({ client, logger: options.logger, generation, resume: watch }),
    generation,
  };
}

/** The roles that keep the run's state: served, checkpointed, scored, and helped to average. */
interface Keeping {
  readonly holder: StateHolder;
  readonly checkpointer: Checkpointer;
  readonly helper: AveragingHelper;
  readonly validator: ContributionValidator | undefined;
  readonly evaluator: CheckpointEvaluator | undefined;
}

function createKeeping(context: RolesContext, monitor: Monitor): Keeping {
  const { options, joined, session, client } = context;
  const { swarm } = session;
  const { logger } = options;
  const { generation, poster, watch } = monitor;
  const learnSize = (length: number) => {
    if (options.helpAveraging) helper.setVectorLength(length);
  };
  const holder = new StateHolder({
    swarm,
    platform: client.platform,
    logger,
    generation,
    onHeld: (state) => {
      learnSize(state.parameters.length);
    },
    onLoaded: (latest) => {
      if (poster.lastPostedStep === undefined) watch.startedFrom(latest.state.epoch);
      checkpointer.resetTo(Math.max(checkpointer.lastStep, latest.state.epoch));
      // An aux that stopped before scoring its last checkpoint (or ran with --no-evaluate) left it unscored.
      if (!latest.evaluated) {
        evaluator?.offer({
          checkpointId: latest.attestation.checkpointId,
          step: latest.state.epoch,
          parameters: latest.state.parameters,
        });
      }
    },
  });
  context.served.holder = holder;
  const scoring: ScoringContext = {
    ...context,
    generation,
    holder,
    scorer: new SharedScorer((openSignal) =>
      openHeldOutScorer({
        config: joined.config,
        server: options.server,
        dataDir: options.dataDir,
        logger,
        signal: openSignal,
      }),
    ),
  };
  const validator = options.validate && options.helpAveraging ? createValidator(scoring) : undefined;
  const evaluator = options.evaluate ? createEvaluator(scoring) : undefined;
  const helper = createHelper(context, { generation, holder, validator, witness: monitor.witness });
  const checkpointer = new Checkpointer({
    everySteps: joined.config.checkpoints.everySteps,
    finalStep: joined.config.training.maxSteps,
    directory: join(options.dataDir, "checkpoints"),
    logger,
    downloadState: async (minEpoch, downloadSignal) => {
      const state = await downloadState(swarm, minEpoch, generation(), downloadSignal);
      learnSize(state.parameters.length);
      return state;
    },
    upload: (file, meta, uploadSignal) => client.uploadCheckpoint(file, meta, uploadSignal),
    onUploaded: (state, uploaded) => {
      if ((state.generation ?? 0) === generation()) holder.hold(state, "the checkpoint it uploaded");
      evaluator?.offer({ checkpointId: uploaded.id, step: state.epoch, parameters: state.parameters });
    },
  });
  return { holder, checkpointer, helper, validator, evaluator };
}

/** Builds the roles and wires them: what one learns or resets, the others hear of. */
function createRoles(context: RolesContext, background: BackgroundTasks): Roles {
  const { options, session, client, addresses, signal } = context;
  const { swarm } = session;
  const { logger } = options;
  const monitor = createMonitor(context);
  const { aggregator, witness, splits, implausible, watch, poster, generation } = monitor;
  const keeping = createKeeping(context, monitor);
  const { holder, checkpointer, helper, validator, evaluator } = keeping;
  const resume = new ResumeReporter({
    client,
    logger,
    watch,
    aggregator,
    lastPostedStep: () => poster.lastPostedStep,
    heldStep: () => holder.state?.epoch,
    // Counted again from there: the steps, the witnessed rounds, the helper's rounds, the checkpoints.
    onResumed: (fromStep) => {
      aggregator.reset();
      witness?.forgetFrom(fromStep);
      helper.forgetFrom(fromStep);
      poster.resumeFrom(fromStep);
      checkpointer.resetTo(fromStep);
    },
  });
  const unsubscribes = [
    ...subscribeToSwarm(context, background, monitor, keeping),
    // The organizer's run control: kept by the swarm's board, which spreads it to every node.
    followRollbacks({
      swarm,
      platform: client.platform,
      logger,
      generation,
      signal,
      background,
      onRolledBack: (state, step, rolledTo) => {
        aggregator.reset(rolledTo);
        witness?.forgetFrom(step);
        helper.forgetFrom(step);
        splits.reset(rolledTo);
        holder.clear();
        holder.hold(state, `the rollback checkpoint of step ${step}`);
        checkpointer.resetTo(step);
        poster.forgetPosted();
        watch.clear();
      },
    }),
  ];
  background.run(session.followRunControl(signal));
  return {
    aggregator,
    implausible,
    helper,
    holder,
    checkpointer,
    registrar: new AddressRegistrar(client, addresses, logger),
    liveness: new LivenessReporter({ swarm, client, aggregator, splits, implausible, logger }),
    resume,
    poster,
    creditLog: new CreditLog(logger),
    sizeLearner: options.helpAveraging
      ? new ModelSizeLearner(swarm, logger, (length) => {
          helper.setVectorLength(length);
        })
      : undefined,
    unsubscribe: () => {
      for (const unsubscribe of unsubscribes) unsubscribe();
    },
    close: async () => {
      await evaluator?.close();
      await validator?.close();
    },
  };
}

/** What the roles hear from the swarm: progress records (refused ones too) and the rounds' contributions. */
function subscribeToSwarm(
  context: RolesContext,
  background: BackgroundTasks,
  { aggregator, splits, implausible, witness }: Monitor,
  { helper, validator }: Keeping,
): (() => void)[] {
  const { swarm } = context.session;
  return [
    swarm.progress.onImplausible((refused) => {
      implausible.record(refused);
    }),
    swarm.progress.on("update", (update) => {
      aggregator.observe(update);
      splits.observe(update);
    }),
    ...(validator === undefined
      ? []
      : [
          swarm.averager.observeContributions((contribution) => {
            validator.observe(contribution);
          }),
        ]),
    ...(witness === undefined
      ? []
      : [
          swarm.averager.observeContributions((contribution) => {
            witness.observe(contribution);
          }),
        ]),
    // A round starts as soon as the swarm has its target batch: the helper looks on every progress
    // record, not only at the next tick, or a fast swarm's rounds close before this aux asks to join
    // (and the validator sees none of them).
    ...(context.options.helpAveraging
      ? [
          swarm.progress.on("update", () => {
            background.run(helper.maybeHelp(context.signal));
          }),
        ]
      : []),
  ];
}

/** The aux's part in averaging rounds: a reducer with weight 0, whose rounds the validator and witness see. */
function createHelper(
  context: RolesContext,
  parts: {
    readonly generation: () => number;
    readonly holder: StateHolder;
    readonly validator: ContributionValidator | undefined;
    readonly witness: RoundWitness | undefined;
  },
): AveragingHelper {
  const { swarm } = context.session;
  const { generation, holder, validator, witness } = parts;
  return new AveragingHelper({
    logger: context.options.logger,
    global: () => swarm.progress.global(),
    report: (epoch) => {
      // The round's leader counts an aux in only while its record names the round it helps.
      swarm.progress.report({
        epoch,
        averagingEpoch: epoch,
        samplesAccumulated: 0,
        samplesPerSecond: 0,
        bytesAggregated: swarm.averager.bytesAggregated,
        generation: generation(),
        ...(holder.state === null ? {} : { stateEpoch: holder.state.epoch }),
      });
    },
    average: async (epoch, vector, roundSignal) => {
      try {
        const outcome = await swarm.averager.average(epoch, vector, 0, roundSignal);
        validator?.finish(epoch);
        return outcome;
      } catch (error) {
        validator?.discard();
        // Even when no group formed (a retry the aux came too late for), the trainers may complete
        // the epoch in a round the aux did not see: the one it saw no longer vouches for it.
        witness?.failed(epoch);
        throw error;
      }
    },
  });
}

/** The held-out evaluation of each checkpoint, scored with the peer's code and posted to the platform. */
function createEvaluator(context: ScoringContext): CheckpointEvaluator {
  const { options, client, signal, scorer } = context;
  return new CheckpointEvaluator({
    logger: options.logger,
    signal,
    retryable: (error) => error instanceof PlatformRequestError && error.retryable,
    openScorer: (openSignal) => scorer.open(openSignal),
    report: (checkpointId, score, reportSignal) => client.postEvaluation(checkpointId, score, reportSignal),
  });
}

/**
 * The validator of contributions: it steps the state this aux serves (its latest checkpoint) by
 * each sampled peer's contribution, measures the held-out loss with the peer's code, and flags a
 * peer whose steps raise it with the platform.
 */
function createValidator(context: ScoringContext): ContributionValidator {
  const { options, joined, client, signal, scorer, holder, generation } = context;
  return new ContributionValidator({
    logger: options.logger,
    signal,
    stepScale: contributionStepScale(joined.config),
    batches: VALIDATION_BATCHES,
    parameters: () => {
      const held = holder.state;
      return held === null
        ? null
        : { step: held.epoch, generation: held.generation ?? 0, parameters: held.parameters };
    },
    generation,
    openScorer: (openSignal) => scorer.open(openSignal),
    report: (flag, reportSignal) => client.postValidatorFlag(flag, reportSignal),
  });
}
