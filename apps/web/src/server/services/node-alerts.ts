import type { AppContext } from "../context.ts";
import type { SessionUser } from "../records.ts";
import type { SetNodeAlertsInput } from "../../api/schemas/alerts.ts";

/**
 * A volunteer's opt-in: an e-mail when one of their nodes stops counting, naming the node, the run and
 * the reason (the alert monitor sends it). Null turns it off.
 */

export interface NodeAlertsView {
  /** Where the e-mails go; null: none are sent. */
  readonly email: string | null;
  /** Whether the platform can send e-mail at all (BARNRAISE_SMTP_URL). */
  readonly available: boolean;
}

export async function readNodeAlerts(ctx: AppContext, user: SessionUser): Promise<NodeAlertsView> {
  const row = await ctx.db.user.findUniqueOrThrow({
    where: { id: user.id },
    select: { nodeAlertsEmail: true },
  });
  return { email: row.nodeAlertsEmail, available: ctx.env.smtp !== undefined };
}

export async function setNodeAlerts(
  ctx: AppContext,
  user: SessionUser,
  input: SetNodeAlertsInput,
): Promise<NodeAlertsView> {
  await ctx.db.user.update({ where: { id: user.id }, data: { nodeAlertsEmail: input.email } });
  ctx.logger.info({ username: user.username, on: input.email !== null }, "node alerts changed");
  return readNodeAlerts(ctx, user);
}
