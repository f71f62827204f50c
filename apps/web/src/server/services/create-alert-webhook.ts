import { randomUUID } from "node:crypto";
import { AppError, AppErrorCode } from "../app-error.ts";
import { generateWebhookSecret, sealWebhookSecret } from "../alerts/webhook-secrets.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { toWebhookView, type AlertWebhookView } from "./read-alert-settings.ts";
import type { SessionUser } from "../records.ts";
import type { CreateAlertWebhookInput } from "../../api/schemas/alerts.ts";

/**
 * The organizer adds a webhook: a URL and the events it receives. Its signing secret is made here
 * and returned this once; the platform keeps it sealed (alerts/webhook-secrets.ts).
 */

export const MAX_WEBHOOKS = 10;

export async function createAlertWebhook(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: CreateAlertWebhookInput,
): Promise<{ webhook: AlertWebhookView; secret: string }> {
  await requireOrganizer(ctx, id, user);
  const count = await ctx.db.alertWebhook.count({ where: { experimentId: id } });
  if (count >= MAX_WEBHOOKS) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `an experiment has at most ${MAX_WEBHOOKS} webhooks; remove one first`,
    );
  }
  const webhookId = randomUUID();
  const secret = generateWebhookSecret();
  const row = await ctx.db.alertWebhook.create({
    data: {
      id: webhookId,
      experimentId: id,
      url: input.url,
      events: JSON.stringify(input.events),
      sealedSecret: sealWebhookSecret(secret, ctx.env.sealingSecrets[0] ?? "", webhookId),
      createdAt: new Date(ctx.now()),
    },
  });
  ctx.logger.info({ experimentId: id, webhookId, host: new URL(input.url).host }, "webhook added");
  return { webhook: toWebhookView(row), secret };
}
