import { randomUUID } from "node:crypto";
import { Prisma } from "@barnraise/prisma";
import type { MetricsIngested, MetricsReport } from "../../api/schemas/peer.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import type { AuxCaller } from "./peer-auth.ts";
import { lastStepOf } from "./run-timelines.ts";

/**
 * An aux monitor posts one aggregated collaborative step with each peer's cumulative contribution.
 *
 * - A report of an older rollback generation than the run's is refused (STALE_GENERATION).
 * - The step's metric (its bytes per peer and utilization null when an older aux leaves them out)
 *   is inserted into the run's current timeline if that timeline has no row for the step yet, and
 *   never updated: steps only move forward, and a repeated step (a restarted monitor, a swarm that
 *   resumed from an older state) leaves the recorded one as it was. The response says whether it
 *   was stored, the timeline, and the timeline's last recorded step.
 * - For each reported peer session this experiment knows, its Contribution row (per peer and
 *   session, so a restarted node keeps every session's credit) takes the maximum of the stored and
 *   the reported counters, so cumulative counters never go backwards (a restarted or lagging monitor
 *   may report older values), and the longest session is the longest seen.
 * - Those peers and the calling aux peer are marked as seen now, and a trainer's `averaging` flag, when
 *   reported, is stored on its node (a node with two sessions in one report averages if either does).
 * - Unknown peers are ignored and counted in the response.
 *
 * Everything is written in one transaction. The insert and the maximum are done by the database in
 * INSERT … ON CONFLICT statements (portable SQL, the same on SQLite and PostgreSQL), so two monitors
 * reporting at once can neither overwrite a step nor move a counter backwards.
 */

type PeerReport = MetricsReport["peers"][number];

/** Rows per INSERT statement: 10 parameters each, well below SQLite's and PostgreSQL's limits. */
const CONTRIBUTION_ROWS_PER_STATEMENT = 500;

export async function ingestMetrics(
  ctx: AppContext,
  caller: AuxCaller,
  report: MetricsReport,
): Promise<MetricsIngested> {
  const { id: experimentId, generation, timeline } = caller.experiment;
  if (report.generation < generation) {
    throw new AppError(
      AppErrorCode.STALE_GENERATION,
      `the report is of generation ${report.generation}, but the run was rolled back to generation ${generation}`,
    );
  }
  const now = new Date(ctx.now());
  const reports = mergeDuplicates(report.peers);
  const peerIds = [...new Set([...reports.values()].map((r) => r.peerId))];
  const known =
    peerIds.length === 0
      ? []
      : await ctx.db.$queryRaw<{ id: string; peerId: string; userId: string }[]>`
          SELECT "id", "peerId", "userId" FROM "Peer"
          WHERE "experimentId" = ${experimentId} AND "peerId" IN (${Prisma.join(peerIds)})`;

  const knownBy = new Map(known.map((peer) => [peer.peerId, peer]));
  const rows: ContributionRow[] = [...reports.values()].flatMap((reported) => {
    const peer = knownBy.get(reported.peerId);
    return peer === undefined
      ? []
      : [{ experimentId, userId: peer.userId, peerRowId: peer.id, report: reported }];
  });
  const seen = [...new Set([caller.peer.id, ...known.map((peer) => peer.id)])];

  const [inserted] = await ctx.db.$transaction([
    insertMetricIfAbsent(ctx, { experimentId, timeline, report }),
    ...chunk(rows, CONTRIBUTION_ROWS_PER_STATEMENT).map((part) => upsertContributions(ctx, part, now)),
    markSeen(ctx, seen, averagingByNode(rows), now),
  ]);
  return {
    ok: true,
    unknownPeers: reports.size - rows.length,
    stored: inserted > 0,
    timeline,
    lastStep: await lastStepOf(ctx, experimentId, timeline),
  };
}

/** Inserts the step into `timeline` unless the timeline already has it; resolves to the rows inserted. */
function insertMetricIfAbsent(
  ctx: AppContext,
  metric: { experimentId: string; timeline: number; report: MetricsReport },
) {
  const { report } = metric;
  const values = Prisma.join([
    metric.experimentId,
    metric.timeline,
    report.step,
    report.generation,
    report.loss,
    report.samplesPerSecond,
    report.alivePeers,
    report.bytesPerPeer ?? null,
    report.utilization ?? null,
    new Date(report.time),
  ]);
  return ctx.db
    .$executeRaw`INSERT INTO "Metric" ("experimentId", "timeline", "step", "generation", "loss", "samplesPerSecond", "alivePeers", "bytesPerPeer", "utilization", "recordedAt") VALUES (${values}) ON CONFLICT ("experimentId", "timeline", "step") DO NOTHING`;
}

/**
 * Marks the nodes `seen` (Peer row ids) as seen `now` and stores the `averaging` flags reported for
 * some of them, in one UPDATE (its CASE keeps the flag of a node that reported none).
 */
function markSeen(
  ctx: AppContext,
  seen: readonly string[],
  averaging: ReadonlyMap<string, boolean>,
  now: Date,
) {
  const withFlag = (flag: boolean) => [...averaging].flatMap(([id, value]) => (value === flag ? [id] : []));
  const branches = [true, false].flatMap((flag) => {
    const ids = withFlag(flag);
    return ids.length === 0 ? [] : [Prisma.sql`WHEN "id" IN (${Prisma.join(ids)}) THEN ${flag}`];
  });
  const averagingValue =
    branches.length === 0
      ? Prisma.sql`"averaging"`
      : Prisma.sql`CASE ${Prisma.join(branches, " ")} ELSE "averaging" END`;
  return ctx.db.$executeRaw`
    UPDATE "Peer" SET "lastSeenAt" = ${now}, "averaging" = ${averagingValue}
    WHERE "id" IN (${Prisma.join(seen)})`;
}

/** Each node's reported `averaging` flag (true if any of its sessions averages), by Peer row id. */
function averagingByNode(rows: readonly ContributionRow[]): Map<string, boolean> {
  const flags = new Map<string, boolean>();
  for (const { peerRowId, report } of rows) {
    if (report.averaging !== undefined) {
      flags.set(peerRowId, report.averaging || flags.get(peerRowId) === true);
    }
  }
  return flags;
}

/** A peer session listed twice counts once, with the larger of each value. */
function mergeDuplicates(peers: readonly PeerReport[]): Map<string, PeerReport> {
  const merged = new Map<string, PeerReport>();
  for (const peer of peers) {
    const key = `${peer.peerId}\0${peer.session}`;
    const previous = merged.get(key);
    merged.set(
      key,
      previous === undefined
        ? peer
        : {
            peerId: peer.peerId,
            session: peer.session,
            samples: Math.max(previous.samples, peer.samples),
            computeSeconds: Math.max(previous.computeSeconds, peer.computeSeconds),
            bytesAggregated: Math.max(previous.bytesAggregated, peer.bytesAggregated),
            sessionSeconds: Math.max(previous.sessionSeconds, peer.sessionSeconds),
            ...(previous.averaging === undefined && peer.averaging === undefined
              ? {}
              : { averaging: previous.averaging === true || peer.averaging === true }),
          },
    );
  }
  return merged;
}

interface ContributionRow {
  readonly experimentId: string;
  readonly userId: string;
  readonly peerRowId: string;
  readonly report: PeerReport;
}

/** Takes the larger of the stored and the new value of `column`. */
const keepMax = (column: string) =>
  `"${column}" = CASE WHEN excluded."${column}" > "Contribution"."${column}" ` +
  `THEN excluded."${column}" ELSE "Contribution"."${column}" END`;

const INSERT_CONTRIBUTIONS =
  'INSERT INTO "Contribution" ("id", "experimentId", "userId", "peerRowId", "session", "samples", ' +
  '"computeSeconds", "bytesAggregated", "longestSessionSeconds", "updatedAt") VALUES ';

const ON_CONFLICT_KEEP_MAX =
  ' ON CONFLICT ("experimentId", "peerRowId", "session") DO UPDATE SET ' +
  [
    keepMax("samples"),
    keepMax("computeSeconds"),
    keepMax("bytesAggregated"),
    keepMax("longestSessionSeconds"),
    '"updatedAt" = excluded."updatedAt"',
  ].join(", ");

/** One multi-row upsert; every value is bound as a parameter. */
function upsertContributions(ctx: AppContext, rows: readonly ContributionRow[], now: Date) {
  const tuples = rows.map(
    (row) =>
      Prisma.sql`(${Prisma.join([
        randomUUID(),
        row.experimentId,
        row.userId,
        row.peerRowId,
        row.report.session,
        BigInt(row.report.samples),
        row.report.computeSeconds,
        BigInt(row.report.bytesAggregated),
        row.report.sessionSeconds,
        now,
      ])})`,
  );
  return ctx.db
    .$executeRaw`${Prisma.raw(INSERT_CONTRIBUTIONS)}${Prisma.join(tuples)}${Prisma.raw(ON_CONFLICT_KEEP_MAX)}`;
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const parts: T[][] = [];
  for (let start = 0; start < items.length; start += size) parts.push(items.slice(start, start + size));
  return parts;
}
