import { randomUUID } from "node:crypto";
import type { Database } from "@barnraise/prisma";
import type { AppContext } from "../context.ts";
import { parseEventList, type AlertEvent, type AlertPayload } from "./alert-events.ts";
import { AlertEventType } from "../../api/schemas/alerts.ts";

/**
 * Puts an event into the alerts outbox: one AlertDelivery row per target that wants it (each
 * webhook subscribed to its type, each e-mail recipient when e-mail is subscribed and an SMTP
 * server is configured). Callers pass their transaction, so the event is recorded together with the
 * change it announces, and the delivery loop (alert-outbox.ts) sends it later, from any instance.
 */

export type OutboxDatabase = Pick<Database, "alertWebhook" | "alertSettings" | "alertDelivery">;

export interface AlertExperiment {
  readonly id: string;
  readonly name: string;
}

export const DeliveryChannel = { webhook: "webhook", email: "email" } as const;
export type DeliveryChannel = (typeof DeliveryChannel)[keyof typeof DeliveryChannel];

export const DeliveryStatus = { pending: "pending", delivered: "delivered", failed: "failed" } as const;
export type DeliveryStatus = (typeof DeliveryStatus)[keyof typeof DeliveryStatus];

interface Target {
  readonly channel: DeliveryChannel;
  readonly target: string;
  readonly webhookId?: string;
  readonly subscriberId?: string;
}

/** The event as its JSON body, stamped with a new event id and the platform's time. */
export function alertPayload(ctx: AppContext, experiment: AlertExperiment, event: AlertEvent): AlertPayload {
  const base = ctx.env.publicUrl;
  return {
    id: randomUUID(),
    type: event.type,
    time: new Date(ctx.now()).toISOString(),
    experiment: {
      id: experiment.id,
      name: experiment.name,
      url: base === undefined ? null : `${base}/experiments/${encodeURIComponent(experiment.id)}`,
    },
    summary: event.summary,
    details: event.details,
  };
}

/** Queues `event` for every target of the experiment's alert settings that subscribes to it; returns the deliveries' ids. */
export async function enqueueAlert(
  ctx: AppContext,
  db: OutboxDatabase,
  experiment: AlertExperiment,
  event: AlertEvent,
): Promise<string[]> {
  const [webhooks, settings] = await Promise.all([
    db.alertWebhook.findMany({
      where: { experimentId: experiment.id },
      select: { id: true, url: true, events: true },
    }),
    db.alertSettings.findUnique({
      where: { experimentId: experiment.id },
      select: { emailRecipients: true, emailEvents: true },
    }),
  ]);
  const targets: Target[] = webhooks
    .filter((webhook) => (parseEventList(webhook.events) as string[]).includes(event.type))
    .map((webhook) => ({ channel: DeliveryChannel.webhook, target: webhook.url, webhookId: webhook.id }));
  if (
    ctx.env.smtp !== undefined &&
    settings !== null &&
    (parseEventList(settings.emailEvents) as string[]).includes(event.type)
  ) {
    for (const address of parseAddressList(settings.emailRecipients)) {
      targets.push({ channel: DeliveryChannel.email, target: address });
    }
  }
  return insertDeliveries(ctx, db, experiment, event, targets);
}

/** Queues a "test" event for one webhook, or for every e-mail recipient; returns the deliveries' ids. */
export async function enqueueTestAlert(
  ctx: AppContext,
  db: OutboxDatabase,
  experiment: AlertExperiment,
  target:
    | { readonly webhook: { readonly id: string; readonly url: string } }
    | { readonly emails: readonly string[] },
): Promise<string[]> {
  const targets: Target[] =
    "webhook" in target
      ? [{ channel: DeliveryChannel.webhook, target: target.webhook.url, webhookId: target.webhook.id }]
      : target.emails.map((address) => ({ channel: DeliveryChannel.email, target: address }));
  return insertDeliveries(
    ctx,
    db,
    experiment,
    {
      type: AlertEventType.test,
      summary: `Test alert for ${experiment.name}: alerts reach you`,
      details: {},
    },
    targets,
  );
}

/** Queues an e-mail to a volunteer about their own node (their opt-in address); never shown to the organizer. */
export async function enqueueVolunteerAlert(
  ctx: AppContext,
  db: OutboxDatabase,
  experiment: AlertExperiment,
  volunteer: { readonly id: string; readonly email: string },
  event: AlertEvent,
): Promise<string[]> {
  if (ctx.env.smtp === undefined) return [];
  return insertDeliveries(ctx, db, experiment, event, [
    { channel: DeliveryChannel.email, target: volunteer.email, subscriberId: volunteer.id },
  ]);
}

async function insertDeliveries(
  ctx: AppContext,
  db: OutboxDatabase,
  experiment: AlertExperiment,
  event: AlertEvent,
  targets: readonly Target[],
): Promise<string[]> {
  if (targets.length === 0) return [];
  const payload = alertPayload(ctx, experiment, event);
  const body = JSON.stringify(payload);
  const now = new Date(ctx.now());
  const rows = targets.map((target) => ({
    id: randomUUID(),
    experimentId: experiment.id,
    eventId: payload.id,
    event: event.type,
    payload: body,
    channel: target.channel,
    target: target.target,
    webhookId: target.webhookId ?? null,
    subscriberId: target.subscriberId ?? null,
    nextAttemptAt: now,
    createdAt: now,
  }));
  await db.alertDelivery.createMany({ data: rows });
  ctx.logger.info(
    { experimentId: experiment.id, event: event.type, eventId: payload.id, targets: rows.length },
    "alert queued",
  );
  return rows.map((row) => row.id);
}

/** A JSON array column of e-mail addresses, as stored. */
export function parseAddressList(text: string): string[] {
  const value = JSON.parse(text) as unknown;
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === "string") : [];
}
