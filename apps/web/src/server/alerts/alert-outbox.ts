import type { AppContext } from "../context.ts";
import type { AlertPayload } from "./alert-events.ts";
import { alertMail } from "./alert-messages.ts";
import { DeliveryChannel, DeliveryStatus } from "./enqueue-alert.ts";
import { openWebhookSecret } from "./webhook-secrets.ts";
import { sendWebhook, type AttemptOutcome } from "./webhook-sender.ts";

/**
 * Delivering the alerts outbox. Any number of web instances run this on one database: an instance
 * claims a due delivery with one conditional update (a lease: `leaseOwner`, `leaseUntil`), so only
 * one of them sends it; an instance that dies mid-send leaves a lease that expires, and another
 * instance retries. Every attempt is logged (AlertAttempt). A failed attempt is retried after 30 s,
 * 2 min, 10 min and 1 h; after the fifth the delivery is marked failed. Finished deliveries are kept
 * for `LOG_RETENTION_MS`, then pruned with their attempts.
 */

export const RETRY_DELAYS_MS = [30_000, 2 * 60_000, 10 * 60_000, 60 * 60_000] as const;
export const MAX_ATTEMPTS = RETRY_DELAYS_MS.length + 1;
/** Longer than any one attempt (the webhook and SMTP timeouts), so a live claim is never taken over. */
export const LEASE_MS = 2 * 60_000;
/** How long delivered and failed alerts stay in the log. */
export const LOG_RETENTION_MS = 30 * 24 * 3600_000;
/** Deliveries one pass of the loop claims at most. */
const BATCH = 20;

/** Sends the deliveries that are due; resolves to how many this instance attempted. */
export async function deliverDueAlerts(ctx: AppContext, workerId: string): Promise<number> {
  const now = new Date(ctx.now());
  const due = await ctx.db.alertDelivery.findMany({
    where: {
      status: DeliveryStatus.pending,
      nextAttemptAt: { lte: now },
      OR: [{ leaseUntil: null }, { leaseUntil: { lt: now } }],
    },
    orderBy: { nextAttemptAt: "asc" },
    take: BATCH,
    select: { id: true },
  });
  let attempted = 0;
  for (const { id } of due) {
    if (await attemptDelivery(ctx, id, workerId, { dueBy: now })) attempted += 1;
  }
  return attempted;
}

/** Deletes the deliveries (and their attempts) that finished over `LOG_RETENTION_MS` ago; resolves to how many. */
export async function pruneAlertLog(ctx: AppContext): Promise<number> {
  const removed = await ctx.db.alertDelivery.deleteMany({
    where: {
      status: { in: [DeliveryStatus.delivered, DeliveryStatus.failed] },
      createdAt: { lt: new Date(ctx.now() - LOG_RETENTION_MS) },
    },
  });
  return removed.count;
}

/** Sends the given deliveries at once, whether due or not (the "Send test" buttons). */
export async function deliverNow(ctx: AppContext, ids: readonly string[], workerId: string): Promise<void> {
  for (const id of ids) await attemptDelivery(ctx, id, workerId, {});
}

/** Claims one delivery and, if this instance got it, makes one attempt; false when another has it. */
async function attemptDelivery(
  ctx: AppContext,
  id: string,
  workerId: string,
  options: { dueBy?: Date },
): Promise<boolean> {
  const now = ctx.now();
  const claimed = await ctx.db.alertDelivery.updateMany({
    where: {
      id,
      status: DeliveryStatus.pending,
      ...(options.dueBy === undefined ? {} : { nextAttemptAt: { lte: options.dueBy } }),
      OR: [{ leaseUntil: null }, { leaseUntil: { lt: new Date(now) } }],
    },
    data: { leaseOwner: workerId, leaseUntil: new Date(now + LEASE_MS) },
  });
  if (claimed.count !== 1) return false;
  const delivery = await ctx.db.alertDelivery.findUnique({
    where: { id },
    include: { webhook: { select: { id: true, url: true, sealedSecret: true } } },
  });
  if (delivery === null) return false;

  const startedAt = ctx.now();
  const started = performance.now();
  const outcome = await send(ctx, delivery).catch((error: unknown): AttemptOutcome => ({
    ok: false,
    statusCode: null,
    result: error instanceof Error ? error.message : String(error),
  }));
  const durationMs = Math.round(performance.now() - started);
  const attempts = delivery.attempts + 1;
  const finished = ctx.now();
  const status = outcome.ok
    ? DeliveryStatus.delivered
    : attempts >= MAX_ATTEMPTS
      ? DeliveryStatus.failed
      : DeliveryStatus.pending;
  const retryDelay = RETRY_DELAYS_MS[attempts - 1] ?? 0;
  const result = outcome.result.slice(0, 500);
  try {
    await ctx.db.$transaction([
      ctx.db.alertAttempt.create({
        data: {
          deliveryId: id,
          number: attempts,
          ok: outcome.ok,
          statusCode: outcome.statusCode,
          result,
          durationMs,
          startedAt: new Date(startedAt),
        },
      }),
      ctx.db.alertDelivery.updateMany({
        where: { id, leaseOwner: workerId },
        data: {
          status,
          attempts,
          lastResult: result,
          leaseOwner: null,
          leaseUntil: null,
          ...(status === DeliveryStatus.pending ? { nextAttemptAt: new Date(finished + retryDelay) } : {}),
          ...(status === DeliveryStatus.delivered ? { deliveredAt: new Date(finished) } : {}),
        },
      }),
    ]);
  } catch (error) {
    // The webhook (and with it the delivery) was deleted meanwhile: nothing is left to record.
    ctx.logger.warn({ err: error, deliveryId: id }, "could not record an alert attempt");
  }
  const outcomeLabel = status === DeliveryStatus.pending ? "retry" : status;
  ctx.metrics.alertDeliveries.inc({ channel: delivery.channel, outcome: outcomeLabel });
  ctx.logger.info(
    { deliveryId: id, event: delivery.event, channel: delivery.channel, attempt: attempts, status, result },
    "alert attempt",
  );
  return true;
}

interface ClaimedDelivery {
  readonly id: string;
  readonly event: string;
  readonly channel: string;
  readonly target: string;
  readonly payload: string;
  readonly webhook: { readonly id: string; readonly url: string; readonly sealedSecret: string } | null;
}

async function send(ctx: AppContext, delivery: ClaimedDelivery): Promise<AttemptOutcome> {
  if (delivery.channel === DeliveryChannel.webhook) {
    if (delivery.webhook === null) return { ok: false, statusCode: null, result: "the webhook was removed" };
    return sendWebhook({
      url: delivery.webhook.url,
      secret: openWebhookSecret(delivery.webhook.sealedSecret, ctx.env.sealingSecrets, delivery.webhook.id),
      deliveryId: delivery.id,
      event: delivery.event,
      body: delivery.payload,
      unixSeconds: Math.floor(ctx.now() / 1000),
      privateAddresses: ctx.env.webhookPrivateAddresses,
    });
  }
  if (ctx.mailer === null) {
    return {
      ok: false,
      statusCode: null,
      result: "no SMTP server is configured (BARNRAISE_SMTP_URL and BARNRAISE_MAIL_FROM)",
    };
  }
  const reply = await ctx.mailer.send(
    alertMail(delivery.target, JSON.parse(delivery.payload) as AlertPayload),
  );
  return { ok: true, statusCode: null, result: reply };
}
