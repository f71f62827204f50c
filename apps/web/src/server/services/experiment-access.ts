import type { Database } from "@barnraise/prisma";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../records.ts";
import type { ExperimentRecord } from "../records.ts";
import { AllowlistStatus } from "../../api/schemas/allowlist.ts";
import { ExperimentStatus } from "../../api/schemas/experiments.ts";

/**
 * Loading an experiment and deciding who the caller is to it. Every session route goes through
 * these, so "unknown experiment" is always 404 and "known experiment, not yours" always 403.
 */

/** What the caller is to an experiment: its organizer, an allowlist status, or nothing. */
export type Membership = "organizer" | AllowlistStatus | "none";

/**
 * The statement that bumps the run control's version, for a transaction beside the change it
 * announces (status, allowlist, token revocation): nodes keep the control with the highest version.
 */
export function bumpControlVersion(db: Pick<Database, "experiment">, experimentId: string) {
  return db.experiment.update({
    where: { id: experimentId },
    data: { controlVersion: { increment: 1 } },
    select: { controlVersion: true },
  });
}

export async function findExperiment(ctx: AppContext, id: string): Promise<ExperimentRecord> {
  const experiment = await ctx.lookups.experiments.load(id);
  if (experiment === null) throw new AppError(AppErrorCode.NOT_FOUND, `no experiment with id ${id}`);
  return experiment;
}

/** The experiment, if `user` organizes it: 404 when it does not exist, 403 when it is someone else's. */
export async function requireOrganizer(
  ctx: AppContext,
  id: string,
  user: SessionUser,
): Promise<ExperimentRecord> {
  const experiment = await findExperiment(ctx, id);
  if (experiment.organizerId !== user.id) {
    throw new AppError(AppErrorCode.FORBIDDEN, `only the organizer of ${id} may do this`);
  }
  return experiment;
}

export async function membershipOf(
  ctx: AppContext,
  experiment: Pick<ExperimentRecord, "id" | "organizerId">,
  userId: string,
): Promise<Membership> {
  if (experiment.organizerId === userId) return "organizer";
  const entry = await ctx.db.allowlistEntry.findUnique({
    where: { experimentId_userId: { experimentId: experiment.id, userId } },
    select: { status: true },
  });
  return entry === null ? "none" : parseAllowlistStatus(entry.status);
}

export async function findUserByUsername(
  ctx: AppContext,
  username: string,
): Promise<{ id: string; username: string }> {
  const user = await ctx.db.user.findUnique({ where: { username }, select: { id: true, username: true } });
  if (user === null) throw new AppError(AppErrorCode.NOT_FOUND, `no user named ${username}`);
  return user;
}

export function parseAllowlistStatus(value: string): AllowlistStatus {
  if (value === "pending" || value === "approved" || value === "banned") return value;
  throw new Error(`unknown allowlist status in the database: ${value}`);
}

export function parseExperimentStatus(value: string): ExperimentStatus {
  if (value === "running" || value === "paused") return value;
  throw new Error(`unknown experiment status in the database: ${value}`);
}
