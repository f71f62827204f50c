import { z } from "zod";
import { AlertEventType, ORGANIZER_EVENTS } from "../../server/alerts/alert-events.ts";
import { createAlertWebhookInputSchema } from "../../server/services/create-alert-webhook.ts";
import { setNodeAlertsInputSchema } from "../../server/services/node-alerts.ts";
import { sendTestAlertInputSchema } from "../../server/services/send-test-alert.ts";
import { updateAlertSettingsInputSchema } from "../../server/services/update-alert-settings.ts";

/** Alerts: a run's webhooks and e-mail recipients, the delivery log, and a volunteer's node e-mails. */

const organizerEvent = z.enum(ORGANIZER_EVENTS);

export const updateAlertSettingsRequestSchema = updateAlertSettingsInputSchema.meta({
  id: "UpdateAlertSettingsRequest",
});
export const createAlertWebhookRequestSchema = createAlertWebhookInputSchema.meta({
  id: "CreateAlertWebhookRequest",
});
export const sendTestAlertRequestSchema = sendTestAlertInputSchema.meta({ id: "SendTestAlertRequest" });
export const setNodeAlertsRequestSchema = setNodeAlertsInputSchema.meta({ id: "SetNodeAlertsRequest" });

export const alertWebhookSchema = z
  .strictObject({
    id: z.string(),
    url: z.string(),
    events: z.array(organizerEvent),
    createdAt: z.iso.datetime(),
  })
  .meta({ id: "AlertWebhook" });

export const createdAlertWebhookSchema = z
  .strictObject({
    webhook: alertWebhookSchema,
    secret: z.string().meta({ description: "The HMAC-SHA256 signing secret; shown this once" }),
  })
  .meta({ id: "CreatedAlertWebhook" });

export const alertDeliverySchema = z
  .strictObject({
    id: z.string().meta({ description: "Also the Barnraise-Delivery header the receiver gets" }),
    event: z.enum(Object.values(AlertEventType)),
    channel: z.enum(["webhook", "email"]),
    target: z.string().meta({ description: "The webhook's URL or the e-mail address" }),
    status: z.enum(["pending", "delivered", "failed"]),
    attempts: z.number().int(),
    lastResult: z.string().nullable(),
    nextAttemptAt: z.iso.datetime().nullable(),
    deliveredAt: z.iso.datetime().nullable(),
    createdAt: z.iso.datetime(),
  })
  .meta({ id: "AlertDelivery" });

export const alertSettingsSchema = z
  .strictObject({
    email: z.strictObject({
      available: z
        .boolean()
        .meta({ description: "Whether the platform has an SMTP server (BARNRAISE_SMTP_URL)" }),
      recipients: z.array(z.string()),
      events: z.array(organizerEvent),
    }),
    stalledAfterMinutes: z.number().int(),
    auxSilentAfterMinutes: z.number().int(),
    webhooks: z.array(alertWebhookSchema),
    deliveries: z.array(alertDeliverySchema).meta({ description: "The 50 newest, newest first" }),
  })
  .meta({ id: "AlertSettings" });

export const testAlertResultSchema = z
  .strictObject({ deliveries: z.array(alertDeliverySchema) })
  .meta({ id: "TestAlertResult" });

export const nodeAlertsSchema = z
  .strictObject({
    email: z.string().nullable(),
    available: z.boolean().meta({ description: "Whether the platform can send e-mail at all" }),
  })
  .meta({ id: "NodeAlerts" });
