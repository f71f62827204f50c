import { randomUUID } from "node:crypto";
import { parseExperimentConfig } from "@barnraise/protocol";
import { storedConfigOf } from "./stored-config.ts";
import { groupCommit, Prisma, type Database } from "@barnraise/prisma";
import type DataLoader from "dataloader";
import type { MetricsIngested, MetricsReport } from "../api/schemas/peer.ts";
import type { Logger } from "./logger.ts";
import type { AuxCaller } from "./records.ts";

type PeerReport = MetricsReport["peers"][number];

interface PendingReport {
  readonly caller: AuxCaller;
  readonly report: MetricsReport;
}

/** Reports per batch; their contributions are written in statements of at most 500 rows. */
const REPORTS_PER_BATCH = 64;

/**
 * Rows per statement (10 parameters each in an INSERT; ids in an IN list), well below SQLite's and
 * PostgreSQL's limits on parameters also when a batch's reports name many peers.
 */
const ROWS_PER_STATEMENT = 500;

/**
 * The platform's writer of metric reports. Reports that arrive while one batch is being written go
 * together in the next, in one transaction of a few statements whatever their number: the steps in
 * one INSERT, the contributions (the largest of each counter over the batch) in one upsert, the
 * nodes seen in one UPDATE. A batch behaves as its reports written one after the other in arrival
 * order: of two reports of one step the first is stored, and a node's `averaging` flag is the last
 * one reported. Each report's answer is read after the batch is committed. If a batch fails, its
 * reports are written one by one, so a report fails only for its own reasons.
 */
export class MetricsIngestion {
  readonly #reports: DataLoader<PendingReport, MetricsIngested>;
  readonly #db: Database;
  readonly #now: () => number;
  readonly #logger: Logger;

  constructor(db: Database, now: () => number, logger: Logger) {
    this.#db = db;
    this.#now = now;
    this.#logger = logger;
    this.#reports = groupCommit(
      async (reports) => {
        if (reports.length === 1) return this.#write(reports);
        try {
          return await this.#write(reports);
        } catch (error) {
          logger.warn(
            { err: error, reports: reports.length },
            "writing a batch of metric reports failed; writing them one by one",
          );
          const alone: (MetricsIngested | Error)[] = [];
          for (const report of reports) {
            alone.push(await this.#write([report]).then((results) => results[0] as MetricsIngested, asError));
          }
          return alone;
        }
      },
      { maxBatchSize: REPORTS_PER_BATCH },
    );
  }

  /** Writes an authenticated aux's report (of the run's generation or newer) with the others pending. */
  write(caller: AuxCaller, report: MetricsReport): Promise<MetricsIngested> {
    return this.#reports.load({ caller, report });
  }

  async #write(pending: readonly PendingReport[]): Promise<MetricsIngested[]> {
    const db = this.#db;
    const now = new Date(this.#now());
    const merged = pending.map(({ report }) => mergeDuplicates(report.peers));
    const known = await this.#knownPeers(pending, merged);

    // The first report of each (experiment, timeline, step) is the one inserted.
    const stepKey = (p: PendingReport) =>
      `${p.caller.experiment.id}\0${p.caller.experiment.timeline}\0${p.report.step}`;
    const firstOfStep = new Map<string, PendingReport>();
    for (const p of pending) if (!firstOfStep.has(stepKey(p))) firstOfStep.set(stepKey(p), p);
    // A step far past what the run could have reached since its last recorded one is not recorded.
    const ends = await recordedEndsOf(db, pending);
    for (const [key, p] of firstOfStep) {
      const { id, timeline } = p.caller.experiment;
      const end = ends.get(`${id}\0${timeline}`);
      if (end === undefined) continue;
      const reach = reachableStep(end, now.getTime());
      if (p.report.step <= reach) continue;
      firstOfStep.delete(key);
      this.#logger.warn(
        { experimentId: id, timeline, step: p.report.step, lastStep: end.step, reachable: reach },
        `refused a metric point at step ${p.report.step}: the run's last recorded step is ${end.step}, and it can have reached ${reach} at most since`,
      );
    }

    const rows: ContributionRow[] = [];
    const averaging = new Map<string, boolean>();
    const seen = new Set<string>();
    const unknownPeers = pending.map(({ caller }, i) => {
      seen.add(caller.peer.id);
      const reports = merged[i] ?? new Map<string, PeerReport>();
      const nodeFlags = new Map<string, boolean>();
      let unknown = 0;
      for (const reported of reports.values()) {
        const peer = known.get(`${caller.experiment.id}\0${reported.peerId}`);
        if (peer === undefined) {
          unknown += 1;
          continue;
        }
        seen.add(peer.id);
        rows.push({
          experimentId: caller.experiment.id,
          userId: peer.userId,
          peerRowId: peer.id,
          report: reported,
        });
        if (reported.averaging !== undefined) {
          nodeFlags.set(peer.id, reported.averaging || nodeFlags.get(peer.id) === true);
        }
      }
      for (const [id, flag] of nodeFlags) averaging.set(id, flag);
      return unknown;
    });

    const bounded = await this.#boundCredit(mergeContributions(rows), pending, now.getTime());
    const contributions = chunk(bounded, ROWS_PER_STATEMENT);
    const steps = [...firstOfStep.values()];
    const results = await db.$transaction([
      ...(steps.length === 0 ? [] : [insertMetricsIfAbsent(db, steps)]),
      ...contributions.map((part) => upsertContributions(db, part, now)),
      ...chunk([...seen], ROWS_PER_STATEMENT).map((part) => markSeen(db, part, averaging, now)),
    ]);
    const inserted =
      steps.length === 0 ? [] : (results[0] as Awaited<ReturnType<typeof insertMetricsIfAbsent>>);
    const stored = new Set(
      inserted.map((row) => `${row.experimentId}\0${Number(row.timeline)}\0${Number(row.step)}`),
    );
    const lastSteps = await lastStepsOf(db, pending);
    return pending.map((p, i) => {
      const { id, timeline } = p.caller.experiment;
      return {
        ok: true,
        unknownPeers: unknownPeers[i] ?? 0,
        stored: firstOfStep.get(stepKey(p)) === p && stored.has(stepKey(p)),
        timeline,
        lastStep: lastSteps.get(`${id}\0${timeline}`) ?? null,
      };
    });
  }

  /**
   * The rows with each node's reported growth of samples and compute time cut to what the run can
   * have done since its credit last grew (see `creditBound`); one SELECT per experiment.
   */
  async #boundCredit(
    rows: readonly ContributionRow[],
    pending: readonly PendingReport[],
    now: number,
  ): Promise<ContributionRow[]> {
    if (rows.length === 0) return [];
    const experiments = new Map(pending.map(({ caller }) => [caller.experiment.id, caller.experiment]));
    const stored = new Map<string, StoredCredit>();
    const credited = new Map<string, number>();
    for (const [experimentId, ofExperiment] of groupBy(rows, (row) => row.experimentId)) {
      const nodes = [...new Set(ofExperiment.map((row) => row.peerRowId))];
      for (const part of chunk(nodes, ROWS_PER_STATEMENT)) {
        const found = await this.#db.contribution.findMany({
          where: { experimentId, peerRowId: { in: part } },
          select: {
            peerRowId: true,
            session: true,
            samples: true,
            reportedSamples: true,
            computeSeconds: true,
            updatedAt: true,
          },
        });
        for (const row of found) {
          stored.set(`${row.peerRowId}\0${row.session}`, {
            samples: Number(row.samples),
            reportedSamples: Number(row.reportedSamples),
            computeSeconds: row.computeSeconds,
          });
          const at = row.updatedAt.getTime();
          credited.set(row.peerRowId, Math.max(credited.get(row.peerRowId) ?? 0, at));
        }
      }
    }
    const result: ContributionRow[] = [];
    for (const [peerRowId, ofNode] of groupBy(rows, (row) => row.peerRowId)) {
      const experiment = experiments.get(ofNode[0]?.experimentId ?? "");
      if (experiment === undefined) continue;
      const longest = Math.max(...ofNode.map((row) => row.report.sessionSeconds));
      // Since its credit last grew, or, for a node never credited, since the aux first saw it.
      const since = credited.get(peerRowId) ?? now - longest * 1000;
      const bound = creditBound(experiment, Math.max(0, now - since));
      let samplesLeft = bound.samples;
      let secondsLeft = bound.computeSeconds;
      for (const row of ofNode) {
        const before = stored.get(`${peerRowId}\0${row.report.session}`) ?? {
          samples: 0,
          reportedSamples: 0,
          computeSeconds: 0,
        };
        // Only what the reported total grew by since the largest one reported is new work: a total
        // repeated (a session's first claim, seen once by the aux) is not credited again.
        const grown = Math.max(0, row.report.samples - before.reportedSamples);
        const samplesGain = Math.min(grown, samplesLeft);
        const secondsGain = Math.min(
          Math.max(0, row.report.computeSeconds - before.computeSeconds),
          secondsLeft,
        );
        samplesLeft -= samplesGain;
        secondsLeft -= secondsGain;
        const samples = before.samples + samplesGain;
        const computeSeconds = Math.max(
          before.computeSeconds,
          Math.min(row.report.computeSeconds, before.computeSeconds + secondsGain),
        );
        if (samplesGain < grown || computeSeconds < row.report.computeSeconds) {
          this.#logger.warn(
            {
              experimentId: row.experimentId,
              peer: row.report.peerId,
              session: row.report.session,
              reported: { samples: row.report.samples, computeSeconds: row.report.computeSeconds },
              credited: { samples, computeSeconds },
            },
            `credited ${row.report.peerId} less than reported: its credit cannot grow faster than the run trains`,
          );
        }
        result.push({
          ...row,
          reportedSamples: Math.max(before.reportedSamples, row.report.samples),
          report: { ...row.report, samples, computeSeconds },
        });
      }
    }
    return result;
  }

  /** The reported peers this experiment knows, by experiment id and PeerId: one SELECT per experiment. */
  async #knownPeers(
    pending: readonly PendingReport[],
    merged: readonly Map<string, PeerReport>[],
  ): Promise<Map<string, { id: string; userId: string }>> {
    const peerIdsByExperiment = new Map<string, Set<string>>();
    pending.forEach(({ caller }, i) => {
      const peerIds = peerIdsByExperiment.get(caller.experiment.id) ?? new Set<string>();
      for (const reported of merged[i]?.values() ?? []) peerIds.add(reported.peerId);
      peerIdsByExperiment.set(caller.experiment.id, peerIds);
    });
    const known = new Map<string, { id: string; userId: string }>();
    for (const [experimentId, peerIds] of peerIdsByExperiment) {
      for (const part of chunk([...peerIds], ROWS_PER_STATEMENT)) {
        const rows = await this.#db.$queryRaw<{ id: string; peerId: string; userId: string }[]>`
          SELECT "id", "peerId", "userId" FROM "Peer"
          WHERE "experimentId" = ${experimentId} AND "peerId" IN (${Prisma.join(part)})`;
        for (const row of rows) known.set(`${experimentId}\0${row.peerId}`, row);
      }
    }
    return known;
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** A node session's credit as stored. */
interface StoredCredit {
  readonly samples: number;
  readonly reportedSamples: number;
  readonly computeSeconds: number;
}

/**
 * The most a node's credit can grow in `elapsedMs` (see `MetricsIngestion`): samples at
 * CREDIT_RATE_SLACK times the swarm's throughput (at least MIN_CREDIT_RATE), plus four target
 * batches (a step's credit lands at once, and steps overshoot their target); compute time at the
 * wall clock's pace, plus a minute.
 */
export function creditBound(
  experiment: { readonly config: string; readonly swarmSamplesPerSecond: number },
  elapsedMs: number,
): { samples: number; computeSeconds: number } {
  const seconds = elapsedMs / 1000;
  const rate = Math.max(MIN_CREDIT_RATE, experiment.swarmSamplesPerSecond);
  return {
    samples: Math.ceil(CREDIT_RATE_SLACK * rate * seconds + 4 * targetBatchSizeOf(experiment.config)),
    computeSeconds: seconds * CREDIT_RATE_SLACK + 60,
  };
}

/** How much faster than the swarm's throughput a node's credit may grow (throughput varies). */
export const CREDIT_RATE_SLACK = 2;
/** The throughput assumed when the swarm reports less (a run just starting, or idle). */
export const MIN_CREDIT_RATE = 100;

function targetBatchSizeOf(config: string): number {
  try {
    return storedConfigOf({ config }).training.targetBatchSize;
  } catch {
    return parseExperimentConfig({}).training.targetBatchSize;
  }
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const group = groups.get(key(item));
    if (group === undefined) groups.set(key(item), [item]);
    else group.push(item);
  }
  return groups;
}

/**
 * How far a run's step may move past its last recorded one: MAX_STEPS_PER_SECOND for every second
 * since that step was recorded, and at least MIN_STEP_LEAD. A swarm that trained on while the
 * platform was down reports far ahead, and is believed; a forged step a million ahead is not.
 */
export const MAX_STEPS_PER_SECOND = 20;
export const MIN_STEP_LEAD = 100;

/** The highest step believable at `now` after the timeline's last recorded `end`. */
export function reachableStep(end: { step: number; recordedAt: number }, now: number): number {
  const seconds = Math.max(0, now - end.recordedAt) / 1000;
  return end.step + Math.max(MIN_STEP_LEAD, Math.ceil(seconds * MAX_STEPS_PER_SECOND));
}

/**
 * The last recorded step of each (experiment, timeline) the reports are in, and when the latest point
 * was, among the points the organizer has not discarded.
 */
async function recordedEndsOf(
  db: Database,
  pending: readonly PendingReport[],
): Promise<Map<string, { step: number; recordedAt: number }>> {
  const ends = new Map<string, { step: number; recordedAt: number }>();
  for (const [experimentId, ofExperiment] of timelinesOf(pending)) {
    const rows = await db.$queryRaw<
      { timeline: number | bigint; step: number | bigint | null; recordedAt: Date | string | number | null }[]
    >`
      SELECT "timeline", MAX("step") AS "step", MAX("recordedAt") AS "recordedAt" FROM "Metric"
      WHERE "experimentId" = ${experimentId} AND "timeline" IN (${Prisma.join([...ofExperiment])})
        AND "discardedAt" IS NULL
      GROUP BY "timeline"`;
    for (const row of rows) {
      if (row.step === null || row.recordedAt === null) continue;
      ends.set(`${experimentId}\0${Number(row.timeline)}`, {
        step: Number(row.step),
        recordedAt: new Date(row.recordedAt).getTime(),
      });
    }
  }
  return ends;
}

function timelinesOf(pending: readonly PendingReport[]): Map<string, Set<number>> {
  const timelines = new Map<string, Set<number>>();
  for (const { caller } of pending) {
    const ofExperiment = timelines.get(caller.experiment.id) ?? new Set<number>();
    ofExperiment.add(caller.experiment.timeline);
    timelines.set(caller.experiment.id, ofExperiment);
  }
  return timelines;
}

/**
 * The last recorded step of each (experiment, timeline) the reports are in, by "experiment\0timeline",
 * among the points the organizer has not discarded.
 */
async function lastStepsOf(db: Database, pending: readonly PendingReport[]): Promise<Map<string, number>> {
  const last = new Map<string, number>();
  for (const [experimentId, ofExperiment] of timelinesOf(pending)) {
    const rows = await db.$queryRaw<{ timeline: number | bigint; step: number | bigint | null }[]>`
      SELECT "timeline", MAX("step") AS "step" FROM "Metric"
      WHERE "experimentId" = ${experimentId} AND "timeline" IN (${Prisma.join([...ofExperiment])})
        AND "discardedAt" IS NULL
      GROUP BY "timeline"`;
    for (const row of rows) {
      if (row.step !== null) last.set(`${experimentId}\0${Number(row.timeline)}`, Number(row.step));
    }
  }
  return last;
}

/**
 * Inserts each report's step into its experiment's current timeline unless the timeline already has
 * it; resolves to the rows inserted.
 */
function insertMetricsIfAbsent(db: Database, pending: readonly PendingReport[]) {
  const tuples = pending.map(
    ({ caller, report }) =>
      Prisma.sql`(${Prisma.join([
        caller.experiment.id,
        caller.experiment.timeline,
        report.step,
        report.generation,
        report.loss,
        report.samplesPerSecond,
        report.alivePeers,
        report.bytesPerPeer ?? null,
        report.utilization ?? null,
        report.samples ?? null,
        new Date(report.time),
      ])})`,
  );
  return db.$queryRaw<{ experimentId: string; timeline: number | bigint; step: number | bigint }[]>`
    INSERT INTO "Metric" ("experimentId", "timeline", "step", "generation", "loss", "samplesPerSecond", "alivePeers", "bytesPerPeer", "utilization", "samples", "recordedAt")
    VALUES ${Prisma.join(tuples)}
    ON CONFLICT ("experimentId", "timeline", "step") DO NOTHING
    RETURNING "experimentId", "timeline", "step"`;
}

/**
 * Marks the nodes `seen` (Peer row ids) as seen `now`, by the platform and in the swarm (the aux
 * reported their fresh records), and stores the `averaging` flags reported for some of them, in one
 * UPDATE (its CASE keeps the flag of a node that reported none).
 */
function markSeen(db: Database, seen: readonly string[], averaging: ReadonlyMap<string, boolean>, now: Date) {
  const withFlag = (flag: boolean) => seen.filter((id) => averaging.get(id) === flag);
  const branches = [true, false].flatMap((flag) => {
    const ids = withFlag(flag);
    return ids.length === 0 ? [] : [Prisma.sql`WHEN "id" IN (${Prisma.join(ids)}) THEN ${flag}`];
  });
  const averagingValue =
    branches.length === 0
      ? Prisma.sql`"averaging"`
      : Prisma.sql`CASE ${Prisma.join(branches, " ")} ELSE "averaging" END`;
  return db.$executeRaw`
    UPDATE "Peer" SET "lastSeenAt" = ${now}, "swarmSeenAt" = ${now}, "averaging" = ${averagingValue}
    WHERE "id" IN (${Prisma.join(seen)})`;
}

/** A peer session listed twice counts once, with the larger of each value. */
function mergeDuplicates(peers: readonly PeerReport[]): Map<string, PeerReport> {
  const merged = new Map<string, PeerReport>();
  for (const peer of peers) {
    const key = `${peer.peerId}\0${peer.session}`;
    const previous = merged.get(key);
    merged.set(key, previous === undefined ? peer : larger(previous, peer));
  }
  return merged;
}

/** One peer session's report with the larger of each counter of two; it averages if either does. */
function larger(a: PeerReport, b: PeerReport): PeerReport {
  return {
    peerId: b.peerId,
    session: b.session,
    samples: Math.max(a.samples, b.samples),
    computeSeconds: Math.max(a.computeSeconds, b.computeSeconds),
    bytesAggregated: Math.max(a.bytesAggregated, b.bytesAggregated),
    sessionSeconds: Math.max(a.sessionSeconds, b.sessionSeconds),
    ...(a.averaging === undefined && b.averaging === undefined
      ? {}
      : { averaging: a.averaging === true || b.averaging === true }),
  };
}

interface ContributionRow {
  readonly experimentId: string;
  readonly userId: string;
  readonly peerRowId: string;
  readonly report: PeerReport;
  /** The largest total reported for the session (what `report.samples` was before the credit bound). */
  readonly reportedSamples?: number;
}

/** One row per (experiment, node, session): the largest of each counter the batch reports for it. */
function mergeContributions(rows: readonly ContributionRow[]): ContributionRow[] {
  const merged = new Map<string, ContributionRow>();
  for (const row of rows) {
    const key = `${row.experimentId}\0${row.peerRowId}\0${row.report.session}`;
    const previous = merged.get(key);
    merged.set(key, previous === undefined ? row : { ...row, report: larger(previous.report, row.report) });
  }
  return [...merged.values()];
}

/** Takes the larger of the stored and the new value of `column`. */
const keepMax = (column: string) =>
  `"${column}" = CASE WHEN excluded."${column}" > "Contribution"."${column}" ` +
  `THEN excluded."${column}" ELSE "Contribution"."${column}" END`;

const INSERT_CONTRIBUTIONS =
  'INSERT INTO "Contribution" ("id", "experimentId", "userId", "peerRowId", "session", "samples", ' +
  '"reportedSamples", "computeSeconds", "bytesAggregated", "longestSessionSeconds", "updatedAt") VALUES ';

const ON_CONFLICT_KEEP_MAX =
  ' ON CONFLICT ("experimentId", "peerRowId", "session") DO UPDATE SET ' +
  [
    keepMax("samples"),
    keepMax("reportedSamples"),
    keepMax("computeSeconds"),
    keepMax("bytesAggregated"),
    keepMax("longestSessionSeconds"),
    '"updatedAt" = excluded."updatedAt"',
  ].join(", ");

/** One multi-row upsert; every value is bound as a parameter. */
function upsertContributions(db: Database, rows: readonly ContributionRow[], now: Date) {
  const tuples = rows.map(
    (row) =>
      Prisma.sql`(${Prisma.join([
        randomUUID(),
        row.experimentId,
        row.userId,
        row.peerRowId,
        row.report.session,
        BigInt(row.report.samples),
        BigInt(row.reportedSamples ?? row.report.samples),
        row.report.computeSeconds,
        BigInt(row.report.bytesAggregated),
        row.report.sessionSeconds,
        now,
      ])})`,
  );
  return db.$executeRaw`${Prisma.raw(INSERT_CONTRIBUTIONS)}${Prisma.join(tuples)}${Prisma.raw(ON_CONFLICT_KEEP_MAX)}`;
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const parts: T[][] = [];
  for (let start = 0; start < items.length; start += size) parts.push(items.slice(start, start + size));
  return parts;
}
