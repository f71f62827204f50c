import { type ExperimentConfig } from "@barnraise/protocol";
import { swarmSplitReportSchema } from "../../api/schemas/peer.ts";
import { SWARM_FRESH_MS, type SwarmStatusView } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { findExperiment, parseExperimentStatus } from "./experiment-access.ts";
import { STALE_AFTER_MS } from "./peer-status.ts";
import type { ExperimentRecord } from "../records.ts";
import type { ExperimentStatus } from "../../api/schemas/experiments.ts";
import { storedConfigOf } from "../stored-config.ts";

/** The public view of experiments: the list on the landing page and one experiment's details. */

export interface ExperimentView {
  readonly id: string;
  readonly name: string;
  readonly description: string;
  readonly status: ExperimentStatus;
  /** The organizer's username. */
  readonly organizer: string;
  /** The complete config, every default applied. */
  readonly config: ExperimentConfig;
  readonly configVersion: number;
  readonly authorityPublicKey: string;
  readonly authorityKeyVersion: number;
  /** The live swarm, from its aux peer's heartbeat. */
  readonly swarm: SwarmStatusView;
  /** How many machines one trainer token, and one volunteer across tokens, may run at once. */
  readonly limits: { readonly maxNodesPerToken: number; readonly maxNodesPerUser: number };
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface ExperimentSummary {
  readonly id: string;
  readonly name: string;
  readonly description: string;
  readonly status: ExperimentStatus;
  readonly organizer: string;
  readonly modelKind: ExperimentConfig["model"]["kind"];
  /** Peers seen within the last two minutes. */
  readonly peersOnline: number;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export function toExperimentView(
  experiment: ExperimentRecord,
  organizer: string,
  now: number,
): ExperimentView {
  return {
    id: experiment.id,
    name: experiment.name,
    description: experiment.description,
    status: parseExperimentStatus(experiment.status),
    organizer,
    config: storedConfigOf(experiment),
    configVersion: experiment.configVersion,
    authorityPublicKey: experiment.authorityPublicKey,
    authorityKeyVersion: experiment.authorityKeyVersion,
    limits: { maxNodesPerToken: experiment.maxNodesPerToken, maxNodesPerUser: experiment.maxNodesPerUser },
    swarm: swarmStatusOf(experiment, now),
    createdAt: experiment.createdAt.toISOString(),
    updatedAt: experiment.updatedAt.toISOString(),
  };
}

/**
 * The swarm as the aux peer's heartbeat last described it. A heartbeat older than 30 s means nobody
 * is known to train: no peers alive, no throughput, waiting since the swarm went idle (or since the last heartbeat,
 * or since the experiment was created when there never was one).
 */
export function swarmStatusOf(
  experiment: Pick<
    ExperimentRecord,
    | "swarmAlivePeers"
    | "swarmSamplesPerSecond"
    | "swarmSeenAt"
    | "idleSince"
    | "createdAt"
    | "splitSince"
    | "split"
  >,
  now: number,
): SwarmStatusView {
  const seenAt = experiment.swarmSeenAt;
  const fresh = seenAt !== null && now - seenAt.getTime() <= SWARM_FRESH_MS;
  const alivePeers = fresh ? experiment.swarmAlivePeers : 0;
  const waitingSince =
    alivePeers > 0 ? null : (experiment.idleSince ?? seenAt ?? experiment.createdAt).toISOString();
  return {
    alivePeers,
    samplesPerSecond: fresh ? experiment.swarmSamplesPerSecond : 0,
    seenAt: seenAt?.toISOString() ?? null,
    waitingSince,
    split: fresh ? splitOf(experiment.splitSince, experiment.split) : null,
  };
}

/** The aux's latest split report, as the public view shows it; null when there is none or it does not parse. */
function splitOf(since: Date | null, stored: string | null): SwarmStatusView["split"] {
  if (since === null || stored === null) return null;
  const parsed = swarmSplitReportSchema.safeParse(JSON.parse(stored));
  if (!parsed.success) return null;
  const { kind, step, summary, groups } = parsed.data;
  return {
    kind,
    step,
    since: since.toISOString(),
    summary,
    groups: groups.map((g) => ({ ...g, peers: [...g.peers] })),
  };
}

/** The view of an experiment row that has just been written. */
export async function experimentViewOf(
  ctx: AppContext,
  experiment: ExperimentRecord,
): Promise<ExperimentView> {
  const organizer = await ctx.db.user.findUniqueOrThrow({
    where: { id: experiment.organizerId },
    select: { username: true },
  });
  return toExperimentView(experiment, organizer.username, ctx.now());
}

export async function readExperiment(ctx: AppContext, id: string): Promise<ExperimentView> {
  return experimentViewOf(ctx, await findExperiment(ctx, id));
}

/** Every experiment, newest first, with how many peers are online in each. */
export async function listExperiments(ctx: AppContext): Promise<ExperimentSummary[]> {
  const [experiments, online] = await Promise.all([
    ctx.db.experiment.findMany({
      orderBy: [{ createdAt: "desc" }, { id: "asc" }],
      include: { organizer: { select: { username: true } } },
    }),
    ctx.db.peer.groupBy({
      by: ["experimentId"],
      where: { lastSeenAt: { gte: new Date(ctx.now() - STALE_AFTER_MS) } },
      _count: { _all: true },
    }),
  ]);
  const onlineBy = new Map(online.map((row) => [row.experimentId, row._count._all]));
  return experiments.map((experiment) => {
    const config = storedConfigOf(experiment);
    return {
      id: experiment.id,
      name: experiment.name,
      description: experiment.description,
      status: parseExperimentStatus(experiment.status),
      organizer: experiment.organizer.username,
      modelKind: config.model.kind,
      peersOnline: onlineBy.get(experiment.id) ?? 0,
      createdAt: experiment.createdAt.toISOString(),
      updatedAt: experiment.updatedAt.toISOString(),
    };
  });
}
