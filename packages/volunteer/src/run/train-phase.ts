import { fetchRunControl } from "@barnraise/swarm";
import { deriveSeed, type TrainableModel } from "@barnraise/models";
import { followSwarmContact, type SwarmContact } from "../training/follow-swarm-contact.ts";
import { Trainer, type TrainResult } from "../training/trainer.ts";
import { logOptimizerEvents } from "../status/optimizer-events.ts";
import type { Cleanups } from "./cleanups.ts";
import type { PeerData } from "./data-phase.ts";
import type { SwarmSearch } from "./find-swarm.ts";
import { followRunControl } from "./follow-run-control.ts";
import type { VolunteerOptions } from "./volunteer-options.ts";
import type { SwarmMember } from "./swarm-phase.ts";

/** How long a peer waits for the run control before its first minibatch. */
const FIRST_CONTROL_MS = 5_000;

export interface TrainPhase {
  readonly options: VolunteerOptions;
  readonly model: TrainableModel;
  readonly data: PeerData;
  readonly member: SwarmMember;
  readonly search: SwarmSearch;
  readonly cleanups: Cleanups;
  /** When the process started, for the time to the first contribution. */
  readonly startedAt: number;
  readonly now: () => number;
}

/**
 * Trains until the run's last step or a stop: the trainer's minibatches go into the collaborative
 * optimizer, while the peer follows its contact with the swarm (refused, or stepping alone for
 * minutes while others train: it says so and holds) and the organizer's run control (pause, bans,
 * rollback), read once before the first minibatch. Ctrl-C or a refusal by the platform finishes
 * the round in flight and returns; a refusal is then thrown.
 */
export async function train(phase: TrainPhase): Promise<TrainResult> {
  const { options, member, search, cleanups } = phase;
  const { reporter, abortSignal } = options;
  const { session, optimizer } = member;
  const { swarm, platform, joined } = session;
  /** The peer's contact with the swarm, set once the trainer exists (see below). */
  const contact: { current?: SwarmContact } = {};
  const { controls } = options;
  // While the trainer holds, its record says why the volunteer's rules hold it (none for the
  // organizer's pause alone), so that the others neither count it nor wait for it.
  let held = false;
  const sayPaused = () => {
    swarm.progress.setPaused(held ? (controls?.reasons ?? []) : []);
  };
  const trainer = createTrainer(
    phase,
    () => contact.current?.note(),
    (holding) => {
      held = holding;
      sayPaused();
    },
  );
  // Refused by the swarm, or stepping alone for minutes while others train: say so, and hold.
  const stopContact = followSwarmContact({
    swarm,
    platform,
    optimizer,
    trainer,
    reporter,
    auxListed: search.auxListed,
    signal: AbortSignal.any([search.signal, abortSignal]),
  });
  contact.current = stopContact;
  cleanups.add(() => {
    stopContact.stop();
  });
  // The organizer's run control (pause, bans, rollback), from the platform and from other nodes.
  const followControl = followRunControl({
    swarm,
    platform,
    optimizer,
    trainer,
    reporter,
    username: joined.pass.username,
    leave: session.refuse,
  });
  cleanups.add(followControl.stop);
  // A node that joins a paused run (it was in the swarm before, so the platform lets it refresh)
  // waits from its first minibatch: the run control is read once before training starts.
  try {
    swarm.control.offer(
      await fetchRunControl(platform, AbortSignal.any([abortSignal, AbortSignal.timeout(FIRST_CONTROL_MS)])),
      "platform",
    );
  } catch (error) {
    reporter.logger.debug({ err: error }, "could not read the run control before training");
  }
  void session.followRunControl(AbortSignal.any([followControl.signal, abortSignal]));
  // The volunteer's own pause (a tab's button, its page hidden, the machine's rules).
  if (controls !== undefined) {
    const follow = () => {
      if (controls.paused) trainer.pause("volunteer");
      else trainer.resume("volunteer");
      sayPaused();
    };
    follow();
    cleanups.add(controls.onChange(follow));
  }
  // Ctrl-C or a refused pass refresh: finish the round in flight, then leave.
  const stopping = AbortSignal.any([options.stopSignal, session.leaving]);
  const stopOnSignal = () => {
    trainer.stop();
  };
  if (stopping.aborted) trainer.stop();
  stopping.addEventListener("abort", stopOnSignal, { once: true });
  let result: TrainResult;
  try {
    result = await trainer.run(abortSignal);
  } finally {
    stopping.removeEventListener("abort", stopOnSignal);
  }
  if (session.refused !== undefined) throw session.refused;
  reporter.log("info", result.reason === "max-steps" ? "the run reached its last step" : "stopped training", {
    step: result.step,
    samplesContributed: result.samplesContributed,
    minibatches: result.minibatches,
  });
  return result;
}

/** The training loop over the peer's batches, reporting its status and events. */
function createTrainer(
  phase: TrainPhase,
  note: () => string | undefined,
  onHeld: (held: boolean) => void,
): Trainer {
  const { options, model, data, member, now, startedAt } = phase;
  const { reporter } = options;
  const { progress, optimizer } = member;
  const { swarm, joined } = member.session;
  return new Trainer({
    model,
    optimizer,
    progress,
    batches: data.batches,
    swarm: {
      global: () => swarm.progress.global(),
      peersOnline: () => swarm.progress.snapshot().alivePeers,
      connectivity: () => swarm.node.connectivity(),
      note,
    },
    seed: deriveSeed(data.seed, 1),
    maxSteps: joined.config.training.maxSteps,
    onStatus: (status) => {
      const held = options.controls?.reasons ?? [];
      reporter.status(
        held.length > 0 && status.phase === "paused" ? { ...status, pauseReasons: held } : status,
      );
      swarm.metrics.step.set(status.step);
      swarm.metrics.samplesPerSecond.set(status.localSamplesPerSecond);
      swarm.metrics.peersOnline.set(status.peersOnline);
    },
    onEvent: logOptimizerEvents(reporter),
    onHeld,
    ...(options.controls === undefined ? {} : { dutyCycle: () => options.controls?.dutyCycle ?? 1 }),
    ...(options.runtime.cpuTimeMs === undefined ? {} : { cpuTimeMs: options.runtime.cpuTimeMs }),
    onFirstContribution: (samples) => {
      const secondsSinceStart = Number(((now() - startedAt) / 1000).toFixed(2));
      reporter.log("info", "first minibatch contributed", { samples, secondsSinceStart });
      reporter.event?.({ type: "first-sample", samples, secondsSinceStart });
    },
  });
}
