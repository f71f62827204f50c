import { randomUUID } from "node:crypto";
import { Prisma } from "@barnraise/prisma";
import type { MetricsIngested, MetricsReport } from "../../api/schemas/peer.ts";
import type { AppContext } from "../context.ts";
import type { AuxCaller } from "./peer-auth.ts";

/**
 * An aux monitor posts one aggregated collaborative step with each peer's cumulative contribution.
 *
 * - The step's metric is upserted: sending a step again overwrites it.
 * - For each reported peer this experiment knows, its Contribution row takes the maximum of the
 *   stored and the reported counters, so cumulative counters never go backwards (a restarted or
 *   lagging monitor may report older values), and the longest session is the longest seen.
 * - Those peers and the calling aux peer are marked as seen now.
 * - Unknown peers are ignored and counted in the response.
 *
 * Everything is written in one transaction. The maximum is taken by the database in one
 * INSERT … ON CONFLICT DO UPDATE statement (portable SQL, the same on SQLite and PostgreSQL), so two
 * monitors reporting at once cannot move a counter backwards either.
 */

type PeerReport = MetricsReport["peers"][number];

/** Rows per INSERT statement: 9 parameters each, well below SQLite's and PostgreSQL's limits. */
const CONTRIBUTION_ROWS_PER_STATEMENT = 500;

export async function ingestMetrics(
  ctx: AppContext,
  caller: AuxCaller,
  report: MetricsReport,
): Promise<MetricsIngested> {
  const experimentId = caller.experiment.id;
  const now = new Date(ctx.now());
  const reports = mergeDuplicates(report.peers);
  const known =
    reports.size === 0
      ? []
      : await ctx.db.peer.findMany({
          where: { experimentId, peerId: { in: [...reports.keys()] } },
          select: { id: true, peerId: true, userId: true },
        });

  const rows: ContributionRow[] = known.flatMap((peer) => {
    const reported = reports.get(peer.peerId);
    return reported === undefined
      ? []
      : [{ experimentId, userId: peer.userId, peerRowId: peer.id, report: reported }];
  });
  const seen = [...new Set([caller.peer.id, ...known.map((peer) => peer.id)])];
  const metric = {
    loss: report.loss,
    samplesPerSecond: report.samplesPerSecond,
    alivePeers: report.alivePeers,
    recordedAt: new Date(report.time),
  };

  await ctx.db.$transaction([
    ctx.db.metric.upsert({
      where: { experimentId_step: { experimentId, step: report.step } },
      create: { experimentId, step: report.step, ...metric },
      update: metric,
    }),
    ...chunk(rows, CONTRIBUTION_ROWS_PER_STATEMENT).map((part) => upsertContributions(ctx, part, now)),
    ctx.db.peer.updateMany({ where: { id: { in: seen } }, data: { lastSeenAt: now } }),
  ]);
  return { ok: true, unknownPeers: reports.size - rows.length };
}

/** A peer listed twice counts once, with the larger of each value. */
function mergeDuplicates(peers: readonly PeerReport[]): Map<string, PeerReport> {
  const merged = new Map<string, PeerReport>();
  for (const peer of peers) {
    const previous = merged.get(peer.peerId);
    merged.set(
      peer.peerId,
      previous === undefined
        ? peer
        : {
            peerId: peer.peerId,
            samples: Math.max(previous.samples, peer.samples),
            computeSeconds: Math.max(previous.computeSeconds, peer.computeSeconds),
            bytesAggregated: Math.max(previous.bytesAggregated, peer.bytesAggregated),
            sessionSeconds: Math.max(previous.sessionSeconds, peer.sessionSeconds),
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
  'INSERT INTO "Contribution" ("id", "experimentId", "userId", "peerRowId", "samples", ' +
  '"computeSeconds", "bytesAggregated", "longestSessionSeconds", "updatedAt") VALUES ';

const ON_CONFLICT_KEEP_MAX =
  ' ON CONFLICT ("experimentId", "peerRowId") DO UPDATE SET ' +
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
