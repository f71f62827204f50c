import {
  unrefTimer,
  type CollaborativeOptimizer,
  type PlatformClient,
  type RefusalLog,
  type SwarmNode,
} from "@barnraise/swarm";
import { z } from "zod";
import type { Reporter } from "../status/peer-status.ts";
import { CutOffGuard, type CutOffVerdict } from "./cut-off-guard.ts";
import type { Trainer } from "./trainer.ts";

/** How often the peer looks at its contact with the swarm. */
const CHECK_EVERY_MS = 2_000;
/** How often, while it steps alone, it asks the platform whether others train. */
const PLATFORM_EVERY_MS = 30_000;

/** The part of the experiment's public view the peer reads: the swarm's trainers alive. */
const publicSwarmSchema = z.object({ swarm: z.object({ alivePeers: z.number().int().nonnegative() }) });

/** What the contact watch reads of the swarm: its members and who refused this node's pass. */
export interface ContactSwarm {
  readonly node: Pick<SwarmNode, "members" | "modeOf" | "onGreeted"> & {
    readonly refusedBy: Pick<RefusalLog, "recent">;
  };
}

export interface SwarmContactOptions {
  readonly swarm: ContactSwarm;
  /** For the swarm's liveness in the experiment's public view. */
  readonly platform: Pick<PlatformClient, "get" | "experimentId">;
  readonly optimizer: Pick<
    CollaborativeOptimizer,
    "soloSteps" | "dropSoloSteps" | "treatSoloStepsAsPrivate" | "on"
  >;
  readonly trainer: Pick<Trainer, "pause" | "resume" | "refreshStatus">;
  readonly reporter: Pick<Reporter, "log"> & { readonly logger: Pick<Reporter["logger"], "debug"> };
  /** Whether the platform listed aux peers at the last join or rediscovery. */
  readonly auxListed: () => boolean;
  readonly signal: AbortSignal;
  /** Default DEFAULT_CUT_OFF_AFTER_MS (2 minutes). */
  readonly cutOffAfterMs?: number;
}

export interface SwarmContact {
  /** What keeps the peer from the swarm, for its status line; undefined while nothing does. */
  note(): string | undefined;
  stop(): void;
}

/**
 * Watches the peer's contact with the swarm (CutOffGuard) every few seconds: says in the status
 * line when members refuse its pass, and when it has stepped alone for minutes while others train,
 * holds training, drops its solo steps (so it rejoins at the swarm's state) and says why; it lets
 * go as soon as the swarm takes it again. The swarm node and the rediscovery loop keep trying
 * meanwhile.
 *
 * Steps taken alone while cut off (refused by the members it had, or no aux peer reached while the
 * platform says others train) are private: when the peer reaches an aux peer again it drops them at
 * once, before its next round, and catches up with the swarm's state. Otherwise a peer that
 * trained alone a little longer than the swarm would have its private model adopted by everyone
 * (the most advanced state is the one newcomers load), or would average the swarm's updates into
 * other parameters. A lone volunteer connected to the run's aux trains the run's model: its solo
 * steps are not private.
 */
export function followSwarmContact(options: SwarmContactOptions): SwarmContact {
  const { swarm, optimizer, trainer, reporter } = options;
  let platformAlive: number | undefined;
  let platformAskedAt = -Infinity;
  let verdict: CutOffVerdict = { cutOff: false };
  const guard = new CutOffGuard({
    soloSteps: () => optimizer.soloSteps,
    ...(options.cutOffAfterMs === undefined ? {} : { cutOffAfterMs: options.cutOffAfterMs }),
    evidence: {
      refusals: () => swarm.node.refusedBy.recent(),
      hasMembers: () => swarm.node.members().length > 0,
      auxConnected: () => swarm.node.members().some((peer) => swarm.node.modeOf(peer) === "aux"),
      auxListed: options.auxListed,
      platformAlivePeers: () => platformAlive,
    },
  });
  const askPlatform = () => {
    if (optimizer.soloSteps === 0 && !guard.held) return;
    if (Date.now() - platformAskedAt < PLATFORM_EVERY_MS) return;
    platformAskedAt = Date.now();
    const path = `/api/v1/experiments/${encodeURIComponent(options.platform.experimentId)}`;
    options.platform.get(path, publicSwarmSchema, options.signal).then(
      (view) => {
        platformAlive = view.swarm.alivePeers;
      },
      (error: unknown) => {
        reporter.logger.debug({ err: error }, "could not read the swarm's liveness from the platform");
      },
    );
  };
  const noteOf = (of: CutOffVerdict) => (of.cutOff ? `${of.reason} — ${of.advice}` : of.refused);
  const check = () => {
    askPlatform();
    const before = verdict;
    verdict = guard.check();
    // Held, the trainer shows no minibatches: tell the status line of a new note now.
    if (noteOf(verdict) !== noteOf(before)) trainer.refreshStatus();
    if (verdict.cutOff && !before.cutOff) {
      const droppedTo = optimizer.dropSoloSteps();
      trainer.pause("cut-off");
      reporter.log(
        "warn",
        `cut off from the swarm: ${verdict.reason}; not training a model nobody uses until it rejoins (${verdict.advice})`,
        {
          reason: verdict.reason,
          ...(droppedTo === undefined ? {} : { backToStep: droppedTo }),
        },
      );
    } else if (!verdict.cutOff && before.cutOff) {
      trainer.resume("cut-off");
      reporter.log("info", "back in the swarm: training again from the swarm's state");
    } else if (
      !verdict.cutOff &&
      verdict.refused !== undefined &&
      !before.cutOff &&
      before.refused === undefined
    ) {
      // The refusing member's own words go to the log only, as a field.
      const [latest] = swarm.node.refusedBy.recent();
      reporter.log(
        "warn",
        `${verdict.refused}; it keeps trying`,
        latest === undefined ? {} : { refusal: latest },
      );
    }
  };
  const stopPrivateSteps = dropPrivateStepsOnRejoin(options, () => platformAlive);
  const timer = setInterval(check, CHECK_EVERY_MS);
  unrefTimer(timer);
  return {
    note: () => noteOf(verdict),
    stop: () => {
      clearInterval(timer);
      stopPrivateSteps();
    },
  };
}

/**
 * Marks the steps taken alone while cut off as private, and drops them when an aux peer greets this
 * node again (see followSwarmContact). Returns the unsubscribe function.
 */
function dropPrivateStepsOnRejoin(
  options: Pick<SwarmContactOptions, "swarm" | "optimizer" | "reporter" | "auxListed">,
  platformAlive: () => number | undefined,
): () => void {
  const { swarm, optimizer, reporter } = options;
  // Private steps: taken alone while cut off from the swarm.
  let privateSteps = 0;
  // Cut off, as the guard sees it: refused by the members it had, or no aux peer reached while the
  // platform says others train. An aux restarting under a lone volunteer is neither: its steps are
  // the run's.
  const isolated = () => {
    const members = swarm.node.members();
    if (members.length === 0 && swarm.node.refusedBy.recent(30_000).length > 0) return true;
    const auxReached = members.some((peer) => swarm.node.modeOf(peer) === "aux");
    return options.auxListed() && !auxReached && (platformAlive() ?? 0) > 0;
  };
  optimizer.treatSoloStepsAsPrivate(isolated);
  const unsubscribeSteps = optimizer.on((event) => {
    if (event.type !== "step") return;
    // A shared step, or one alone in touch with the swarm, is the run's; the optimizer then forgets
    // where the private steps began too.
    privateSteps = event.soloSteps === 0 || !isolated() ? 0 : privateSteps + 1;
  });
  const unsubscribeGreeted = swarm.node.onGreeted((peer) => {
    if (privateSteps === 0 || swarm.node.modeOf(peer) !== "aux") return;
    const steps = privateSteps;
    privateSteps = 0;
    const backTo = optimizer.dropSoloSteps();
    if (backTo === undefined) return;
    reporter.log(
      "warn",
      `reached the swarm again: dropped the ${steps} step(s) trained alone meanwhile and catching up with the swarm's state from step ${backTo}`,
      { droppedSteps: steps, backToStep: backTo },
    );
  });
  return () => {
    unsubscribeSteps();
    unsubscribeGreeted();
  };
}
