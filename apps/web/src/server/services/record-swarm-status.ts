import type { SwarmStatusReport } from "../../api/schemas/peer.ts";
import { SWARM_FRESH_MS } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import type { AuxCaller } from "./peer-auth.ts";

/**
 * An aux peer's heartbeat (every 10 s): how many trainers have fresh progress and how fast the swarm
 * trains. The public view shows it for 30 s; after that, no peer counts as alive. When the count
 * falls to 0 the run is waiting for volunteers: `idleSince` records since when (kept while the count
 * stays 0, cleared when it rises). A swarm whose heartbeats had stopped was already idle since the
 * last one (or, before any heartbeat, since the experiment was created), so that is when its wait
 * began: the public view's `waitingSince` never jumps forward while nobody trains.
 */
export async function recordSwarmStatus(
  ctx: AppContext,
  caller: AuxCaller,
  report: SwarmStatusReport,
): Promise<{ ok: true }> {
  const experiment = caller.experiment;
  const now = ctx.now();
  const lastSeen = experiment.swarmSeenAt;
  const wasAlive =
    lastSeen !== null && now - lastSeen.getTime() <= SWARM_FRESH_MS && experiment.swarmAlivePeers > 0;
  const idleSince =
    report.alivePeers > 0
      ? null
      : (experiment.idleSince ?? (wasAlive ? new Date(now) : (lastSeen ?? experiment.createdAt)));
  await ctx.db.$transaction([
    // Raw, so that the experiment's updatedAt keeps meaning "the organizer changed it".
    ctx.db
      .$executeRaw`UPDATE "Experiment" SET "swarmAlivePeers" = ${report.alivePeers}, "swarmSamplesPerSecond" = ${report.samplesPerSecond}, "swarmSeenAt" = ${new Date(now)}, "idleSince" = ${idleSince} WHERE "id" = ${experiment.id}`,
    ctx.db.peer.update({ where: { id: caller.peer.id }, data: { lastSeenAt: new Date(now) } }),
  ]);
  return { ok: true };
}
