import { join } from "node:path";
import type { RunControl } from "@barnraise/protocol";
import {
  abortableSleep,
  loadLatestCheckpoint,
  loadRollbackCheckpoint,
  Swarm,
  type JoinedExperiment,
  joinAsNode,
  logInto,
  type NodeSession,
  openNodeSession,
  type TrainingState,
} from "@barnraise/swarm";
import type { Logger } from "pino";
import { swarmHeartbeat } from "./monitor/heartbeat.ts";
import { ResumeWatch } from "./monitor/resume-watch.ts";
import { CreditLog } from "./monitor/credit-log.ts";
import { ImplausibleRecords } from "./monitor/implausible-records.ts";
import { RoundWitness } from "./monitor/round-witness.ts";
import { SplitWatch } from "./monitor/split-watch.ts";
import { StepAggregator, type AggregatedStep } from "./monitor/step-aggregator.ts";
import { AuxPlatformClient, PlatformRequestError } from "./platform-client.ts";
import { AveragingHelper } from "./roles/averaging-helper.ts";
import { CheckpointEvaluator } from "./roles/checkpoint-evaluator.ts";
import { Checkpointer } from "./roles/checkpointer.ts";
import { ContributionValidator, validationStepScale } from "./roles/contribution-validator.ts";
import { openHeldOutScorer } from "./roles/held-out-scorer.ts";
import { SharedScorer } from "./roles/shared-scorer.ts";

export interface AuxRunOptions {
  readonly server: URL;
  readonly token: string;
  readonly identityPath: string;
  /** Staging for checkpoint files; the held-out evaluation's dataset shards and uploaded model. */
  readonly dataDir: string;
  /** Listen multiaddrs; a fixed port keeps the address stable across restarts. */
  readonly listen: readonly string[];
  /** Addresses to register and announce instead of the listen addresses (public IP, DNS name). */
  readonly announce: readonly string[];
  /** Other aux peers or trainers to connect to at start. */
  readonly peers: readonly string[];
  /** Join averaging rounds as a reducer (weight 0). */
  readonly helpAveraging: boolean;
  /** Score each uploaded checkpoint on the dataset's test split and record the score with the platform. */
  readonly evaluate: boolean;
  /**
   * Validate the contributions to the rounds this aux helps average (needs `helpAveraging`): score
   * each sampled one by the change of held-out loss it causes and flag peers whose contributions
   * hurt, with the platform.
   */
  readonly validate: boolean;
  readonly logger: Logger;
  /** Stops the aux: it leaves the swarm and returns. */
  readonly stopSignal: AbortSignal;
  /** Serve Prometheus metrics at http://host:port/metrics (`--metrics-port`, `--metrics-host`). */
  readonly metrics?: { readonly port: number; readonly host: string };
}

/** How often the roles look at the swarm. */
const TICK_MS = 250;
/** Re-register the address this often: join responses list aux peers seen in the last 10 minutes. */
const REGISTER_EVERY_MS = 4 * 60_000;
/** Aggregated steps waiting for the platform; the oldest are dropped beyond this. */
const MAX_QUEUED_STEPS = 200;
/** Wait after the platform failed to take metrics. */
const METRICS_RETRY_MS = 5_000;
/** How often the swarm's liveness goes to the platform (the page says "0 alive" within 30 s). */
const LIVENESS_EVERY_MS = 5_000;
/** Wait before asking the platform again for the checkpoint to serve. */
const CHECKPOINT_RETRY_MS = 15_000;
/**
 * Test-split batches the validator measures each loss on: 512 rows of a classifier (128 a batch),
 * 4,096 tokens of a language model. A round of n sampled senders costs n + 1 such passes.
 */
const VALIDATION_BATCHES = 4;

/**
 * The organizer's aux peer (DESIGN §6): a stable node of the swarm that
 * - bootstraps the swarm and relays for peers behind NAT (aux mode of the swarm node),
 * - registers its address, so join responses list it as an initial peer,
 * - monitors: aggregates the peers' signed progress per step and posts it to the platform,
 * - checkpoints: every K steps downloads the latest state and uploads it,
 * - evaluates each uploaded checkpoint on the dataset's test split, for the platform's chart,
 * - keeps the run's state: it serves its latest checkpoint (loaded from the platform at start,
 *   then each one it uploads) as a state donor, so a run survives all its trainers leaving,
 * - follows the organizer's run control (pause, bans, rollback) and spreads it to the swarm,
 * - reports the swarm's liveness, and tells the platform when the swarm resumed behind the
 *   recorded steps (the curve then continues on a new timeline),
 * - helps averaging as a reducer with weight 0,
 * - validates what trainers contribute to the rounds it helps, and flags those whose contributions
 *   raise the held-out loss on the manage page.
 * Runs until `stopSignal`; throws JoinError when the platform refuses it.
 */
export async function runAux(options: AuxRunOptions): Promise<void> {
  const { logger, stopSignal } = options;
  const node = await joinAsNode({
    server: options.server,
    token: options.token,
    identityPath: options.identityPath,
    role: "aux",
    log: logInto(logger),
    signal: stopSignal,
  });
  const { joined } = node;
  const { config } = joined;
  logger.info(
    { experimentId: joined.experiment.id, checkpointEverySteps: config.checkpoints.everySteps },
    `joined experiment "${joined.experiment.name}" as its aux peer`,
  );

  const held: HeldState = { state: null };
  const session = await openNodeSession(node, {
    mode: "aux",
    listen: options.listen,
    announce: options.announce,
    peers: options.peers,
    logger,
    metrics: options.metrics,
    swarm: () => ({ getState: () => held.state }),
  });
  const { swarm } = session;
  const client = new AuxPlatformClient(session.platform);
  try {
    const addresses = registrableAddresses(options.announce, swarm.node.multiaddrs(), swarm.peerId);
    logger.info({ peerId: swarm.peerId, addresses: swarm.node.multiaddrs() }, "listening");
    const signal = AbortSignal.any([stopSignal, session.leaving]);
    await runRoles({ options, joined, session, client, addresses, signal, held });
  } finally {
    await session.close();
  }
  if (session.refused !== undefined) throw session.refused;
  logger.info("stopped");
}

interface RolesContext {
  readonly options: AuxRunOptions;
  readonly joined: JoinedExperiment;
  /** The aux's node in the swarm (its swarm, the platform's run control, refusals). */
  readonly session: NodeSession;
  readonly client: AuxPlatformClient;
  readonly addresses: readonly string[];
  readonly signal: AbortSignal;
  /** The state this aux serves as a donor: its latest checkpoint. */
  readonly held: HeldState;
}

interface HeldState {
  state: TrainingState | null;
}

/** What the roles that score parameters (checkpoint evaluator, contribution validator) share. */
interface ScoringContext extends RolesContext {
  /** One held-out model for both, built on first use (TF.js is only imported then). */
  readonly scorer: SharedScorer;
  /** The run generation the aux follows now. */
  readonly generation: () => number;
}

async function runRoles(context: RolesContext): Promise<void> {
  const { options, joined, session, client, addresses, signal, held } = context;
  const { swarm } = session;
  const { logger } = options;
  // A call, so that the compiler does not assume the signal unchanged across awaits.
  const stopped = () => signal.aborted;
  // The weights this aux accepts in the rounds it helps: the trainers' credit is held against them.
  const witness = options.helpAveraging ? new RoundWitness() : undefined;
  const aggregator = new StepAggregator({ ttlMs: 5_000, graceMs: 2_500, ...(witness && { witness }) });
  // One run, one model: the trainers' state digests at one step must agree.
  const splits = new SplitWatch({ ttlMs: 5_000 });
  // Trainers whose records claim what none could: the manage page flags them with the reason.
  const implausible = new ImplausibleRecords();
  const unwatchImplausible = swarm.progress.onImplausible((refused) => {
    implausible.record(refused);
  });
  const unsubscribe = swarm.progress.on("update", (update) => {
    aggregator.observe(update);
    splits.observe(update);
  });
  const startedAt = Date.now();
  const generation = () => aggregator.generation;
  const scoring: ScoringContext = {
    ...context,
    generation,
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
  const stopObserving =
    validator === undefined
      ? undefined
      : swarm.averager.observeContributions((contribution) => {
          validator.observe(contribution);
        });
  const stopWitnessing =
    witness === undefined
      ? undefined
      : swarm.averager.observeContributions((contribution) => {
          witness.observe(contribution);
        });
  const helper = new AveragingHelper({
    logger,
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
        ...(held.state === null ? {} : { stateEpoch: held.state.epoch }),
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
  const evaluator = options.evaluate ? createEvaluator(scoring) : undefined;
  const checkpointer = new Checkpointer({
    everySteps: joined.config.checkpoints.everySteps,
    finalStep: joined.config.training.maxSteps,
    directory: join(options.dataDir, "checkpoints"),
    logger,
    downloadState: async (minEpoch, downloadSignal) => {
      const state = await downloadState(swarm, minEpoch, generation(), downloadSignal);
      if (options.helpAveraging) helper.setVectorLength(state.parameters.length);
      return state;
    },
    upload: (file, meta, uploadSignal) => client.uploadCheckpoint(file, meta, uploadSignal),
    onUploaded: (state, uploaded) => {
      if ((state.generation ?? 0) === generation()) hold(state, "the checkpoint it uploaded");
      evaluator?.offer({ checkpointId: uploaded.id, step: state.epoch, parameters: state.parameters });
    },
  });
  const hold = (state: TrainingState, from: string) => {
    if (held.state !== null && (held.state.generation ?? 0) === (state.generation ?? 0)) {
      if (state.epoch <= held.state.epoch) return;
    }
    held.state = state;
    if (options.helpAveraging) helper.setVectorLength(state.parameters.length);
    logger.info(
      { step: state.epoch, generation: state.generation ?? 0 },
      `serving ${from} as the run's state`,
    );
  };
  const resume = new ResumeWatch();
  const creditLog = new CreditLog(logger);
  let lastPostedStep: number | undefined;
  let livenessAt = 0;
  let splitSince: number | undefined;
  let checkpointRetryAt = 0;
  let loadingCheckpoint = false;
  let rollingBack = false;

  const queue: AggregatedStep[] = [];
  /** Steps the platform had recorded already: posted again if the swarm turns out to have resumed. */
  const unstored: AggregatedStep[] = [];
  let metricsRetryAt = 0;
  let registeredAt = -Infinity;
  let learnedLength = !options.helpAveraging;
  const background = new Set<Promise<void>>();
  const inBackground = (work: Promise<void>) => {
    const tracked = work.catch((error: unknown) => {
      if (!signal.aborted) logger.warn({ err: error }, "an aux task failed");
    });
    background.add(tracked);
    void tracked.finally(() => background.delete(tracked));
  };
  // A round starts as soon as the swarm has its target batch: the helper looks on every progress
  // record, not only at the next tick, or a fast swarm's rounds close before this aux asks to join
  // (and the validator sees none of them).
  const unsubscribeHelper = options.helpAveraging
    ? swarm.progress.on("update", () => {
        inBackground(helper.maybeHelp(signal));
      })
    : undefined;

  // The organizer's run control: kept by the swarm's board, which spreads it to every node.
  const unsubscribeControl = swarm.control.on("change", (control: RunControl) => {
    if (control.generation === generation() || control.rollback === null || rollingBack) return;
    rollingBack = true;
    const target = control.rollback;
    inBackground(
      loadRollbackCheckpoint(client.platform, target, control.generation, signal)
        .then((state) => {
          aggregator.reset(control.generation);
          witness?.forgetFrom(target.step);
          helper.forgetFrom(target.step);
          splits.reset(control.generation);
          held.state = null;
          hold(state, `the rollback checkpoint of step ${target.step}`);
          checkpointer.resetTo(target.step);
          lastPostedStep = undefined;
          resume.clear();
          logger.warn(
            { step: target.step, generation: control.generation },
            `the organizer rolled the run back to step ${target.step}`,
          );
        })
        .finally(() => {
          rollingBack = false;
        }),
    );
  });
  inBackground(session.followRunControl(signal));

  try {
    while (!stopped()) {
      const now = Date.now();
      if (now - registeredAt >= REGISTER_EVERY_MS && addresses.length > 0) {
        registeredAt = now;
        try {
          await client.registerAddress(addresses, signal);
          logger.info({ multiaddrs: addresses }, "registered address");
        } catch (error) {
          if (stopped()) break;
          registeredAt = now - REGISTER_EVERY_MS + METRICS_RETRY_MS; // try again soon
          logger.warn({ err: error }, `could not register the address: ${describe(error)}`);
        }
      }

      if (held.state === null && !loadingCheckpoint && now >= checkpointRetryAt) {
        // The run's latest checkpoint, so the run survives its trainers leaving (and this aux restarting).
        loadingCheckpoint = true;
        inBackground(
          loadLatestCheckpoint(client.platform, signal)
            .then((latest) => {
              if (latest === null) {
                checkpointRetryAt = Date.now() + CHECKPOINT_RETRY_MS;
              } else if (latest.attestation.generation === generation()) {
                hold(latest.state, `the platform's checkpoint of step ${latest.state.epoch}`);
                if (lastPostedStep === undefined) resume.startedFrom(latest.state.epoch);
                checkpointer.resetTo(Math.max(checkpointer.lastStep, latest.state.epoch));
                // An aux that stopped before scoring its last checkpoint (or ran with --no-evaluate) left it unscored.
                if (!latest.evaluated) {
                  evaluator?.offer({
                    checkpointId: latest.attestation.checkpointId,
                    step: latest.state.epoch,
                    parameters: latest.state.parameters,
                  });
                }
              }
            })
            .catch((error: unknown) => {
              checkpointRetryAt = Date.now() + CHECKPOINT_RETRY_MS;
              throw error;
            })
            .finally(() => {
              loadingCheckpoint = false;
            }),
        );
      }
      if (!helper.busy && held.state !== null) {
        swarm.progress.report({
          epoch: held.state.epoch,
          samplesAccumulated: 0,
          samplesPerSecond: 0,
          bytesAggregated: swarm.averager.bytesAggregated,
          generation: generation(),
          stateEpoch: held.state.epoch,
        });
      }
      const liveness = aggregator.liveness();
      swarm.metrics.step.set(aggregator.currentStep());
      swarm.metrics.samplesPerSecond.set(liveness.samplesPerSecond);
      swarm.metrics.peersOnline.set(liveness.alivePeers);
      if (now - livenessAt >= LIVENESS_EVERY_MS) {
        livenessAt = now;
        const heartbeat = swarmHeartbeat({
          aggregator,
          splits,
          refusals: swarm.node.refusedPeers,
          implausible,
          now,
        });
        if ((heartbeat.split === null) !== (splitSince === undefined)) {
          splitSince = heartbeat.split?.since;
          if (heartbeat.split === null) logger.info("the swarm trains one model again");
          else logger.warn({ split: heartbeat.split }, `the swarm has split: ${heartbeat.split.summary}`);
        }
        inBackground(client.postSwarmStatus(heartbeat, signal));
      }
      const fromStep = resume.check(
        now,
        aggregator.liveness().alivePeers,
        aggregator.currentStep(),
        lastPostedStep,
        held.state?.epoch,
      );
      if (fromStep !== undefined) {
        // Every live trainer is behind the recorded steps: the swarm resumed from an older state.
        try {
          const answer = await client.reportResume(fromStep, signal);
          if (answer.forked) {
            logger.warn(
              { fromStep, lastStep: answer.lastStep, timeline: answer.timeline },
              `the swarm resumed from step ${fromStep}, behind the recorded steps; the curve goes on from there`,
            );
          }
          aggregator.reset();
          witness?.forgetFrom(fromStep);
          helper.forgetFrom(fromStep);
          queue.unshift(...unstored.splice(0).filter((kept) => kept.step > fromStep));
          lastPostedStep = undefined;
          checkpointer.resetTo(fromStep);
        } catch (error) {
          if (stopped()) break;
          logger.warn({ err: error }, `could not report the resume: ${describe(error)}`);
        }
      }

      aggregator.setOwnContribution({
        peerId: swarm.peerId,
        samples: 0,
        computeSeconds: 0,
        bytesAggregated: swarm.averager.bytesAggregated,
        sessionSeconds: (now - startedAt) / 1000,
      });
      queue.push(...aggregator.collect());
      creditLog.report(aggregator, implausible, now);
      if (queue.length > MAX_QUEUED_STEPS) queue.splice(0, queue.length - MAX_QUEUED_STEPS);
      while (queue.length > 0 && now >= metricsRetryAt && !stopped()) {
        const step = queue[0];
        if (step === undefined) break;
        try {
          const ingested = await client.postMetrics({ ...step, generation: generation() }, signal);
          queue.shift();
          if (ingested.stored) {
            lastPostedStep = step.step;
            unstored.length = 0;
            resume.stored();
          } else {
            // Recorded before: this aux restarted, or the swarm resumed behind the recorded steps.
            lastPostedStep = Math.max(lastPostedStep ?? 0, ingested.lastStep ?? 0);
            resume.refused(step.step);
            unstored.push(step);
            if (unstored.length > MAX_QUEUED_STEPS) unstored.shift();
            continue;
          }
          logger.info(
            {
              step: step.step,
              loss: step.loss,
              alivePeers: step.alivePeers,
              samplesPerSecond: step.samplesPerSecond,
              ...(step.bytesPerPeer === undefined ? {} : { bytesPerPeer: Math.round(step.bytesPerPeer) }),
              ...(step.utilization === undefined ? {} : { utilization: step.utilization }),
              ...(step.samples === undefined ? {} : { samples: step.samples }),
            },
            "metrics posted",
          );
        } catch (error) {
          if (stopped()) break;
          if (error instanceof PlatformRequestError && !error.retryable) {
            queue.shift();
            logger.warn(
              { step: step.step, code: error.code },
              `the platform refused step ${step.step}: ${error.message}`,
            );
          } else {
            metricsRetryAt = Date.now() + METRICS_RETRY_MS;
            logger.warn({ step: step.step }, `could not post metrics: ${describe(error)}; retrying`);
          }
        }
      }

      const step = aggregator.currentStep();
      if (checkpointer.due(step))
        inBackground(checkpointer.maybeCheckpoint(step, aggregator.latestLoss(), signal));
      if (!learnedLength && step > 0) {
        // The helper needs the parameter count: learn it from the first state a trainer serves.
        learnedLength = true;
        inBackground(
          downloadState(swarm, 0, generation(), signal).then(
            (state) => {
              helper.setVectorLength(state.parameters.length);
            },
            (error: unknown) => {
              learnedLength = false;
              logger.debug({ err: error }, "could not learn the model's size yet");
            },
          ),
        );
      }
      if (options.helpAveraging) inBackground(helper.maybeHelp(signal));
      // Woken early by a stop; the loop condition then ends it.
      await abortableSleep(TICK_MS, signal).catch(() => undefined);
    }
  } finally {
    unsubscribe();
    unwatchImplausible();
    unsubscribeControl();
    unsubscribeHelper?.();
    stopObserving?.();
    stopWitnessing?.();
    await Promise.all(background);
    await evaluator?.close();
    await validator?.close();
  }
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
  const { options, joined, client, signal, scorer, held, generation } = context;
  return new ContributionValidator({
    logger: options.logger,
    signal,
    stepScale: validationStepScale(joined.config),
    batches: VALIDATION_BATCHES,
    parameters: () =>
      held.state === null
        ? null
        : {
            step: held.state.epoch,
            generation: held.state.generation ?? 0,
            parameters: held.state.parameters,
          },
    generation,
    openScorer: (openSignal) => scorer.open(openSignal),
    report: (flag, reportSignal) => client.postValidatorFlag(flag, reportSignal),
  });
}

/** The newest state at or after `minEpoch` from the trainers that accept connections. */
async function downloadState(
  swarm: Swarm,
  minEpoch: number,
  generation: number,
  signal: AbortSignal,
): Promise<TrainingState> {
  const donors = swarm.stateDonors(minEpoch, generation);
  if (donors.length === 0) {
    throw new Error(`no trainer connected to this aux peer has reached step ${minEpoch} yet`);
  }
  return swarm.state.download({ donors, minEpoch, generation, signal });
}

/**
 * The addresses to register: the announced ones if given, else the listen addresses other machines
 * can dial (not loopback unless that is all there is), each ending with /p2p/<peer id>, at most 8.
 */
export function registrableAddresses(
  announce: readonly string[],
  listening: readonly string[],
  peerId: string,
): string[] {
  const suffix = `/p2p/${peerId}`;
  const withId = (address: string) => (address.endsWith(suffix) ? address : `${address}${suffix}`);
  const candidates = (announce.length > 0 ? announce : listening).filter(
    (address) => !address.includes("/p2p-circuit"),
  );
  const routable = candidates.filter((address) => !/^\/ip[46]\/(127\.|::1\/)/.test(address));
  const chosen = routable.length > 0 ? routable : candidates;
  return [...new Set(chosen.map(withId))].slice(0, 8);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
