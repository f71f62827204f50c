import type { AppContext } from "../context.ts";
import { parseEventList } from "../alerts/alert-events.ts";
import { DEFAULT_AUX_SILENT_AFTER_MINUTES, DEFAULT_STALLED_AFTER_MINUTES } from "../alerts/alert-monitor.ts";
import { parseAddressList } from "../alerts/enqueue-alert.ts";
import { requireOrganizer } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";
import type { OrganizerEvent } from "../../api/schemas/alerts.ts";

/** The organizer's alert configuration of a run and its recent delivery log (the manage page's "Alerts"). */

/** Deliveries the log shows, newest first. */
export const DELIVERY_LOG_SIZE = 50;

export interface AlertWebhookView {
  readonly id: string;
  readonly url: string;
  readonly events: OrganizerEvent[];
  readonly createdAt: string;
}

export interface AlertDeliveryView {
  readonly id: string;
  readonly event: string;
  readonly channel: "webhook" | "email";
  /** The webhook's URL or the e-mail address. */
  readonly target: string;
  readonly status: "pending" | "delivered" | "failed";
  readonly attempts: number;
  /** The last attempt's outcome; null before the first. */
  readonly lastResult: string | null;
  /** When the next attempt is due; null once delivered or failed. */
  readonly nextAttemptAt: string | null;
  readonly deliveredAt: string | null;
  readonly createdAt: string;
}

export interface AlertSettingsView {
  readonly email: {
    /** Whether the platform has an SMTP server (BARNRAISE_SMTP_URL); without one no e-mail is sent. */
    readonly available: boolean;
    readonly recipients: string[];
    readonly events: OrganizerEvent[];
  };
  readonly stalledAfterMinutes: number;
  readonly auxSilentAfterMinutes: number;
  readonly webhooks: AlertWebhookView[];
  readonly deliveries: AlertDeliveryView[];
}

export async function readAlertSettings(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<AlertSettingsView> {
  await requireOrganizer(ctx, id, user);
  const [settings, webhooks, deliveries] = await Promise.all([
    ctx.db.alertSettings.findUnique({ where: { experimentId: id } }),
    ctx.db.alertWebhook.findMany({
      where: { experimentId: id },
      orderBy: [{ createdAt: "asc" }, { id: "asc" }],
    }),
    // A volunteer's own alerts (subscriberId) are theirs, not the organizer's.
    ctx.db.alertDelivery.findMany({
      where: { experimentId: id, subscriberId: null },
      orderBy: [{ createdAt: "desc" }, { id: "desc" }],
      take: DELIVERY_LOG_SIZE,
    }),
  ]);
  return {
    email: {
      available: ctx.env.smtp !== undefined,
      recipients: settings === null ? [] : parseAddressList(settings.emailRecipients),
      events: settings === null ? [] : parseEventList(settings.emailEvents),
    },
    stalledAfterMinutes: settings?.stalledAfterMinutes ?? DEFAULT_STALLED_AFTER_MINUTES,
    auxSilentAfterMinutes: settings?.auxSilentAfterMinutes ?? DEFAULT_AUX_SILENT_AFTER_MINUTES,
    webhooks: webhooks.map(toWebhookView),
    deliveries: deliveries.map(toDeliveryView),
  };
}

export function toWebhookView(row: {
  id: string;
  url: string;
  events: string;
  createdAt: Date;
}): AlertWebhookView {
  return {
    id: row.id,
    url: row.url,
    events: parseEventList(row.events),
    createdAt: row.createdAt.toISOString(),
  };
}

export function toDeliveryView(row: {
  id: string;
  event: string;
  channel: string;
  target: string;
  status: string;
  attempts: number;
  lastResult: string | null;
  nextAttemptAt: Date;
  deliveredAt: Date | null;
  createdAt: Date;
}): AlertDeliveryView {
  const status = row.status === "delivered" || row.status === "failed" ? row.status : "pending";
  return {
    id: row.id,
    event: row.event,
    channel: row.channel === "email" ? "email" : "webhook",
    target: row.target,
    status,
    attempts: row.attempts,
    lastResult: row.lastResult,
    nextAttemptAt: status === "pending" ? row.nextAttemptAt.toISOString() : null,
    deliveredAt: row.deliveredAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
  };
}
