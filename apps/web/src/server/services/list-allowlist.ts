import type { AppContext } from "../context.ts";
import { parseAllowlistStatus, requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";
import type { AllowlistStatus } from "../../api/schemas/allowlist.ts";

/** The organizer's view of who may join: join requests first, then approved users, then banned ones. */

export interface AllowlistEntryView {
  readonly username: string;
  readonly status: AllowlistStatus;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export function toAllowlistEntryView(entry: {
  status: string;
  createdAt: Date;
  updatedAt: Date;
  user: { username: string };
}): AllowlistEntryView {
  return {
    username: entry.user.username,
    status: parseAllowlistStatus(entry.status),
    createdAt: entry.createdAt.toISOString(),
    updatedAt: entry.updatedAt.toISOString(),
  };
}

const statusOrder: Record<AllowlistStatus, number> = { pending: 0, approved: 1, banned: 2 };

export async function listAllowlist(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<AllowlistEntryView[]> {
  await requireOrganizer(ctx, id, user);
  const entries = await ctx.db.allowlistEntry.findMany({
    where: { experimentId: id },
    include: { user: { select: { username: true } } },
    orderBy: [{ createdAt: "asc" }, { id: "asc" }],
  });
  // A stable sort keeps the oldest request first within each status.
  return entries.map(toAllowlistEntryView).sort((a, b) => statusOrder[a.status] - statusOrder[b.status]);
}
