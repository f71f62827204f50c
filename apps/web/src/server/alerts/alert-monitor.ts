import { SWARM_FRESH_MS } from "../../api/schemas/public.ts";
import type { AppContext } from "../context.ts";
import { parseAllowlistStatus, parseExperimentStatus } from "../services/experiment-access.ts";
import { parsePeerRole } from "../services/peer-standing.ts";
import { peerStatus, peerStatusMessage, swarmViewOf, STALE_AFTER_MS } from "../services/peer-status.ts";
import { enqueueAlert, enqueueVolunteerAlert } from "./enqueue-alert.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";
import { PeerNotCountedReason } from "../../api/schemas/nodes.ts";

/**
 * The alert monitor: a pass over the database that notices what no request announces: a run that
 * stalled, an aux that went silent, a node that stopped counting. Each occurrence is claimed with a
 * conditional update of the state it changes (the wait it is about, the node's last counted flag) in
 * the transaction that queues its alerts, so it is announced once, whichever instance looks first
 * and however often they look, and a restart does not announce it again.
 *
 * - Run stalled: the run is running, its aux reports alive peers, and no new step has come for the
 *   experiment's `stalledAfterMinutes` since the later of the last new step and the moment peers
 *   came alive (both on the platform's clock, as the monitor saw them).
 * - Aux silent: the run is running and its aux's last heartbeat is `auxSilentAfterMinutes` old.
 * - Node dropped / stopped counting: a node the monitor last saw counted no longer is (peer-status.ts
 *   says why). The organizer hears of trainers (not when the run was paused); the node's owner, if they
 *   asked for it, of any of their nodes.
 */

export const DEFAULT_STALLED_AFTER_MINUTES = 10;
export const DEFAULT_AUX_SILENT_AFTER_MINUTES = 5;

const MINUTE = 60_000;

export async function scanForAlerts(ctx: AppContext): Promise<void> {
  await scanRuns(ctx);
  await scanNodes(ctx);
}

async function scanRuns(ctx: AppContext): Promise<void> {
  // Running runs, and those whose peers were last seen alive (to clear that once they stop): a
  // finished or paused run costs nothing on every pass.
  const experiments = await ctx.db.experiment.findMany({
    where: { OR: [{ status: "running" }, { alertSettings: { is: { aliveSince: { not: null } } } }] },
    select: {
      id: true,
      name: true,
      status: true,
      timeline: true,
      swarmAlivePeers: true,
      swarmSeenAt: true,
      alertSettings: true,
    },
  });
  for (const experiment of experiments) {
    const now = ctx.now();
    const settings =
      experiment.alertSettings ??
      (await ctx.db.alertSettings.upsert({
        where: { experimentId: experiment.id },
        create: { experimentId: experiment.id },
        update: {},
      }));
    const running = parseExperimentStatus(experiment.status) === "running";
    const seenAt = experiment.swarmSeenAt;
    const alive =
      running &&
      seenAt !== null &&
      now - seenAt.getTime() <= SWARM_FRESH_MS &&
      experiment.swarmAlivePeers > 0;

    // Peers alive since…: kept while they stay alive, cleared when none are (or the run is paused).
    let aliveSince = settings.aliveSince;
    if (alive !== (aliveSince !== null)) {
      aliveSince = alive ? new Date(now) : null;
      await ctx.db.alertSettings.updateMany({
        where: { experimentId: experiment.id, aliveSince: settings.aliveSince },
        data: { aliveSince },
      });
    }

    // Progress: the newest step's row the organizer has not discarded, first seen now. Ids grow with
    // every row inserted, so a discard or restore that makes an older row the newest is no progress.
    const latest = await ctx.db.metric.findFirst({
      where: { experimentId: experiment.id, timeline: experiment.timeline, discardedAt: null },
      orderBy: { step: "desc" },
      select: { id: true, step: true },
    });
    let progressAt = settings.progressAt;
    if (latest !== null && (settings.lastMetricId === null || latest.id > settings.lastMetricId)) {
      progressAt = new Date(now);
      await ctx.db.alertSettings.updateMany({
        where: { experimentId: experiment.id, lastMetricId: settings.lastMetricId },
        data: { lastMetricId: latest.id, progressAt },
      });
    }

    if (alive && aliveSince !== null) {
      const waitingSince = progressAt !== null && progressAt > aliveSince ? progressAt : aliveSince;
      const alertedFor = settings.stalledAlertedFor;
      if (
        now - waitingSince.getTime() >= settings.stalledAfterMinutes * MINUTE &&
        (alertedFor === null || alertedFor < waitingSince)
      ) {
        const minutes = Math.floor((now - waitingSince.getTime()) / MINUTE);
        await announceOnce(
          ctx,
          experiment.id,
          { stalledAlertedFor: alertedFor },
          { stalledAlertedFor: waitingSince },
          (tx) =>
            enqueueAlert(ctx, tx, experiment, {
              type: AlertEventType.runStalled,
              summary: `${experiment.name} stalled: no new step for ${minutes} minutes while ${experiment.swarmAlivePeers} peer${experiment.swarmAlivePeers === 1 ? " was" : "s were"} alive`,
              details: {
                lastStep: latest?.step ?? null,
                alivePeers: experiment.swarmAlivePeers,
                waitingSince: waitingSince.toISOString(),
                stalledAfterMinutes: settings.stalledAfterMinutes,
              },
            }),
        );
      }
    }

    if (running && seenAt !== null) {
      const alertedFor = settings.auxSilentAlertedFor;
      if (
        now - seenAt.getTime() >= settings.auxSilentAfterMinutes * MINUTE &&
        (alertedFor === null || alertedFor < seenAt)
      ) {
        const minutes = Math.floor((now - seenAt.getTime()) / MINUTE);
        await announceOnce(
          ctx,
          experiment.id,
          { auxSilentAlertedFor: alertedFor },
          { auxSilentAlertedFor: seenAt },
          (tx) =>
            enqueueAlert(ctx, tx, experiment, {
              type: AlertEventType.auxSilent,
              summary: `The aux of ${experiment.name} went silent: no report for ${minutes} minutes`,
              details: {
                lastHeartbeatAt: seenAt.toISOString(),
                auxSilentAfterMinutes: settings.auxSilentAfterMinutes,
              },
            }),
        );
      }
    }
  }
}

type AlertedState = { stalledAlertedFor: Date | null } | { auxSilentAlertedFor: Date | null };
type Tx = Parameters<Parameters<AppContext["db"]["$transaction"]>[0]>[0];

/** Moves the experiment's alert state from `from` to `to` and, if this call moved it, queues the alerts. */
async function announceOnce(
  ctx: AppContext,
  experimentId: string,
  from: AlertedState,
  to: AlertedState,
  queue: (tx: Tx) => Promise<unknown>,
): Promise<void> {
  await ctx.db.$transaction(async (tx) => {
    const moved = await tx.alertSettings.updateMany({ where: { experimentId, ...from }, data: to });
    if (moved.count === 1) await queue(tx);
  });
}

async function scanNodes(ctx: AppContext): Promise<void> {
  const now = ctx.now();
  // The nodes that may have changed: those last seen counted, and those seen recently.
  const peers = await ctx.db.peer.findMany({
    where: { OR: [{ alertCounted: true }, { lastSeenAt: { gte: new Date(now - STALE_AFTER_MS) } }] },
    include: {
      experiment: { select: { id: true, name: true, status: true, organizerId: true } },
      token: { select: { revokedAt: true } },
      user: { select: { id: true, username: true, nodeAlertsEmail: true } },
    },
  });
  if (peers.length === 0) return;
  const entries = await ctx.db.allowlistEntry.findMany({
    where: { OR: peers.map((peer) => ({ experimentId: peer.experimentId, userId: peer.userId })) },
    select: { experimentId: true, userId: true, status: true },
  });
  const entryOf = new Map(entries.map((entry) => [`${entry.experimentId}\0${entry.userId}`, entry.status]));

  for (const peer of peers) {
    const entry = entryOf.get(`${peer.experimentId}\0${peer.userId}`);
    const role = parsePeerRole(peer.role);
    const status = peerStatus(
      {
        experimentStatus: parseExperimentStatus(peer.experiment.status),
        role,
        isOrganizer: peer.experiment.organizerId === peer.userId,
        allowlistStatus: entry === undefined ? null : parseAllowlistStatus(entry),
        tokenRevokedAt: peer.token.revokedAt,
        passExpiresAt: peer.passExpiresAt,
        lastSeenAt: peer.lastSeenAt,
        averaging: peer.averaging,
        ...swarmViewOf(peer),
        retiredAt: peer.retiredAt,
      },
      now,
    );
    if (peer.alertCounted === status.counted) continue;
    await ctx.db.$transaction(async (tx) => {
      const moved = await tx.peer.updateMany({
        where: { id: peer.id, alertCounted: peer.alertCounted },
        data: { alertCounted: status.counted },
      });
      if (moved.count !== 1 || peer.alertCounted !== true || status.counted) return;
      // Held by its volunteer's own rules (the machine in use, on battery …): nothing dropped.
      if (status.reason === PeerNotCountedReason.paused) return;
      const details = {
        node: peer.peerId,
        role,
        owner: peer.user.username,
        reason: status.reason,
        explanation: peerStatusMessage(status.reason, swarmViewOf(peer).swarmRefusal),
        lastSeenAt: peer.lastSeenAt.toISOString(),
      };
      if (role === "trainer" && status.reason !== PeerNotCountedReason.experimentPaused) {
        await enqueueAlert(ctx, tx, peer.experiment, {
          type: AlertEventType.nodeDropped,
          summary: `A node of ${peer.user.username} dropped out of ${peer.experiment.name} (${status.reason})`,
          details,
        });
      }
      if (peer.user.nodeAlertsEmail !== null) {
        await enqueueVolunteerAlert(
          ctx,
          tx,
          peer.experiment,
          { id: peer.user.id, email: peer.user.nodeAlertsEmail },
          {
            type: AlertEventType.nodeStoppedCounting,
            summary: `Your node ${shortPeerId(peer.peerId)} stopped counting in ${peer.experiment.name}`,
            details,
          },
        );
      }
    });
  }
}

function shortPeerId(peerId: string): string {
  return peerId.length <= 16 ? peerId : `${peerId.slice(0, 8)}…${peerId.slice(-6)}`;
}
