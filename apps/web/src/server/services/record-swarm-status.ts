import type { Database } from "@barnraise/prisma";
import type { SwarmSplitReport, SwarmStatusReport } from "../../api/schemas/peer.ts";
import { SWARM_FRESH_MS } from "../../api/schemas/public.ts";
import { enqueueAlert } from "../alerts/enqueue-alert.ts";
import type { AppContext } from "../context.ts";
import type { AuxCaller } from "../records.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";

/**
 * An aux peer's heartbeat (every 5 s): what the swarm is doing, as this aux sees it.
 *
 * - How many trainers have fresh progress and how fast the swarm trains. The public view shows it
 *   for 30 s; after that, no peer counts as alive. When the count falls to 0 the run is waiting for
 *   volunteers: `idleSince` records since when (kept while the count stays 0, cleared when it
 *   rises). A swarm whose heartbeats had stopped was already idle since the last one (or, before any
 *   heartbeat, since the experiment was created), so that is when its wait began: the public view's
 *   `waitingSince` never jumps forward while nobody trains.
 * - Which trainers the swarm accepts (`swarmSeenAt`) and whether each averages: My nodes counts a
 *   trainer only then. Whether its volunteer's rules hold it, and why (`pauseReasons`): My nodes
 *   says "paused: machine in use".
 * - Whose pass the aux refused, and why (`swarmRefused…`): My nodes says so. The aux's times are
 *   taken relative to its report's `time`, so a clock that differs from the platform's does not
 *   reorder a refusal and an acceptance.
 * - Whose progress records the aux refused as implausible, why and how many (`implausible…`): the
 *   manage page flags those nodes with the evidence. The count kept is the largest reported (one
 *   aux counts its own refusals, and a restarted aux starts over).
 * - Whether the swarm has split into more than one model: the dashboards warn while it lasts
 *   (`splitSince`, `split`), and the `swarm.split` alert fires when it begins (at most once per
 *   SPLIT_ALERT_EVERY_MS).
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
  await markAccepted(ctx.db, experiment.id, report.trainers, new Date(now));
  await recordRefusals(ctx.db, experiment.id, report, now);
  await recordImplausible(ctx.db, experiment.id, report, now);
  await recordSplit(ctx, experiment, report.split, now);
  return { ok: true };
}

/** The swarm.split alert goes out at most this often per experiment. */
export const SPLIT_ALERT_EVERY_MS = 30 * 60_000;

/** Peer ids per statement: well under every database's limit on bound parameters. */
const IDS_PER_STATEMENT = 500;

async function markAccepted(
  db: Database,
  experimentId: string,
  trainers: SwarmStatusReport["trainers"],
  now: Date,
): Promise<void> {
  // One statement per verdict and set of pause reasons (a handful in any swarm).
  const groups = new Map<string, { averaging?: boolean; pauseReasons: string | null; peerIds: string[] }>();
  for (const trainer of trainers) {
    const pauseReasons = trainer.paused === undefined ? null : trainer.paused.join(",");
    const key = `${String(trainer.averaging)}|${pauseReasons ?? ""}`;
    const group = groups.get(key) ?? {
      ...(trainer.averaging === undefined ? {} : { averaging: trainer.averaging }),
      pauseReasons,
      peerIds: [],
    };
    group.peerIds.push(trainer.peerId);
    groups.set(key, group);
  }
  for (const { averaging, pauseReasons, peerIds } of groups.values()) {
    for (let i = 0; i < peerIds.length; i += IDS_PER_STATEMENT) {
      await db.peer.updateMany({
        where: { experimentId, role: "trainer", peerId: { in: peerIds.slice(i, i + IDS_PER_STATEMENT) } },
        // An unknown verdict keeps the last one: a restarted node is not "joining" again.
        data: {
          swarmSeenAt: now,
          pauseReasons,
          ...(averaging === undefined ? {} : { averaging }),
        },
      });
    }
  }
}

async function recordRefusals(
  db: Database,
  experimentId: string,
  report: SwarmStatusReport,
  now: number,
): Promise<void> {
  const latest = new Map<string, SwarmStatusReport["refused"][number]>();
  for (const refusal of report.refused) {
    const known = latest.get(refusal.peerId);
    if (known === undefined || refusal.at > known.at) latest.set(refusal.peerId, refusal);
  }
  for (const refusal of latest.values()) {
    // How long ago, by the aux's own clock; never in the future.
    const at = new Date(now - Math.max(0, report.time - refusal.at));
    await db.peer.updateMany({
      where: {
        experimentId,
        peerId: refusal.peerId,
        OR: [{ swarmRefusedAt: null }, { swarmRefusedAt: { lt: at } }],
      },
      data: { swarmRefusedAt: at, swarmRefusalCode: refusal.code, swarmRefusal: refusal.reason },
    });
  }
}

async function recordImplausible(
  db: Database,
  experimentId: string,
  report: SwarmStatusReport,
  now: number,
): Promise<void> {
  for (const refused of report.implausible) {
    // How long ago, by the aux's own clock; never in the future.
    const at = new Date(now - Math.max(0, report.time - refused.at));
    const peers = await db.peer.findMany({
      where: { experimentId, peerId: refused.peerId, role: "trainer" },
      select: { id: true, implausibleAt: true, implausibleCount: true },
    });
    for (const peer of peers) {
      const newer = peer.implausibleAt === null || peer.implausibleAt < at;
      const count = Math.max(peer.implausibleCount, refused.count);
      if (!newer && count === peer.implausibleCount) continue;
      await db.peer.update({
        where: { id: peer.id },
        data: {
          implausibleCount: count,
          ...(newer ? { implausibleAt: at, implausibleReason: refused.reason } : {}),
        },
      });
    }
  }
}

async function recordSplit(
  ctx: AppContext,
  experiment: AuxCaller["experiment"],
  split: SwarmSplitReport | null,
  now: number,
): Promise<void> {
  if (split === null) {
    if (experiment.splitSince !== null) {
      await ctx.db.experiment.updateMany({
        where: { id: experiment.id, splitSince: { not: null } },
        data: { splitSince: null, split: null },
      });
      ctx.logger.info({ experimentId: experiment.id }, "the swarm trains one model again");
    }
    return;
  }
  const text = JSON.stringify(split);
  await ctx.db.$transaction(async (tx) => {
    // Conditional, so that of two heartbeats racing to announce one split, one does.
    const began = await tx.experiment.updateMany({
      where: { id: experiment.id, splitSince: null },
      data: { splitSince: new Date(now), split: text },
    });
    if (began.count === 0) {
      await tx.experiment.updateMany({ where: { id: experiment.id }, data: { split: text } });
      return;
    }
    ctx.logger.warn({ experimentId: experiment.id, split }, `the swarm has split: ${split.summary}`);
    // One alert per SPLIT_ALERT_EVERY_MS at most: a split that heals and comes back (or a volunteer
    // who publishes a fingerprint of their own now and then) does not flood the organizer.
    const alerted = await tx.experiment.updateMany({
      where: {
        id: experiment.id,
        OR: [{ splitAlertedAt: null }, { splitAlertedAt: { lt: new Date(now - SPLIT_ALERT_EVERY_MS) } }],
      },
      data: { splitAlertedAt: new Date(now) },
    });
    if (alerted.count === 0) return;
    await enqueueAlert(ctx, tx, experiment, {
      type: AlertEventType.swarmSplit,
      summary: `The swarm of ${experiment.name} has split: ${split.summary}`,
      details: {
        kind: split.kind,
        step: split.step,
        summary: split.summary,
        groups: split.groups.map((group) => `${group.digest ?? "-"}: ${group.peers.join(" ")}`).join("; "),
        since: new Date(now).toISOString(),
      },
    });
  });
}
