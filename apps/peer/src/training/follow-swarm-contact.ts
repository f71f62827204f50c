import type { CollaborativeOptimizer, PlatformClient, Swarm } from "@barnraise/swarm";
import { z } from "zod";
import type { Reporter } from "../ui/peer-status.ts";
import { CutOffGuard, type CutOffVerdict } from "./cut-off-guard.ts";
import type { Trainer } from "./trainer.ts";

/** How often the peer looks at its contact with the swarm. */
const CHECK_EVERY_MS = 2_000;
/** How often, while it steps alone, it asks the platform whether others train. */
const PLATFORM_EVERY_MS = 30_000;

/** The part of the experiment's public view the peer reads: the swarm's trainers alive. */
const publicSwarmSchema = z.object({ swarm: z.object({ alivePeers: z.number().int().nonnegative() }) });

export interface SwarmContactOptions {
  readonly swarm: Swarm;
  readonly platform: PlatformClient;
  readonly optimizer: CollaborativeOptimizer;
  readonly trainer: Trainer;
  readonly reporter: Reporter;
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
  const check = () => {
    askPlatform();
    const before = verdict;
    verdict = guard.check();
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
      reporter.log("warn", `${verdict.refused}; it keeps trying`);
    }
  };
  const timer = setInterval(check, CHECK_EVERY_MS);
  timer.unref();
  return {
    note: () => {
      if (verdict.cutOff) return `${verdict.reason} — ${verdict.advice}`;
      return verdict.refused;
    },
    stop: () => {
      clearInterval(timer);
    },
  };
}
