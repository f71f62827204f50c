import { z } from "zod";

/** Alerts: a run's webhooks and e-mail recipients, the delivery log, and a volunteer's node e-mails. */

export const AlertEventType = {
  /** No new step for the configured minutes while peers were alive. */
  runStalled: "run.stalled",
  /** A volunteer's node that counted no longer does. */
  nodeDropped: "node.dropped",
  /** No heartbeat from the aux for the configured minutes while the run is running. */
  auxSilent: "aux.silent",
  checkpointUploaded: "checkpoint.uploaded",
  joinRequested: "join.requested",
  /** The aux's validator found a node's contributions raising the held-out loss. */
  nodeFlagged: "node.flagged",
  /** The aux saw the swarm train more than one model (two states at one step, or a trainer alone). */
  swarmSplit: "swarm.split",
  /** To a volunteer: one of their nodes stopped counting. */
  nodeStoppedCounting: "node.stopped-counting",
  test: "test",
} as const;
export type AlertEventType = (typeof AlertEventType)[keyof typeof AlertEventType];

/** The events an organizer can subscribe a webhook or the e-mail recipients to. */
export const ORGANIZER_EVENTS = [
  AlertEventType.runStalled,
  AlertEventType.nodeDropped,
  AlertEventType.auxSilent,
  AlertEventType.checkpointUploaded,
  AlertEventType.joinRequested,
  AlertEventType.nodeFlagged,
  AlertEventType.swarmSplit,
] as const;

export type OrganizerEvent = (typeof ORGANIZER_EVENTS)[number];

export const organizerEventSchema = z.enum(ORGANIZER_EVENTS);

/**
 * Where a webhook may point: an absolute http:// or https:// URL of at most 2,000 characters, with no
 * user name or password in it (the signature authenticates the platform; a receiver's credentials
 * would be shown on the manage page and kept in every delivery's log). Loopback and private addresses
 * are allowed: a self-hosted platform often alerts a service on its own network.
 */
export const webhookUrlSchema = z
  .string()
  .trim()
  .max(2000, "must be at most 2000 characters")
  .pipe(z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }))
  .refine((text) => {
    const url = URL.parse(text);
    return url === null || (url.username === "" && url.password === "");
  }, "must not contain a user name or password");

export const createAlertWebhookInputSchema = z.strictObject({
  url: webhookUrlSchema,
  events: z
    .array(organizerEventSchema)
    .min(1, "pick at least one event")
    .max(16)
    .transform((events) => [...new Set(events)]),
});

export type CreateAlertWebhookInput = z.infer<typeof createAlertWebhookInputSchema>;

export const setNodeAlertsInputSchema = z.strictObject({
  email: z.email("must be an e-mail address").max(254).nullable(),
});

export type SetNodeAlertsInput = z.infer<typeof setNodeAlertsInputSchema>;

export const sendTestAlertInputSchema = z.union([
  z.strictObject({ webhookId: z.string().min(1).max(100) }),
  z.strictObject({ email: z.literal(true) }),
]);

export type SendTestAlertInput = z.infer<typeof sendTestAlertInputSchema>;

export const MAX_EMAIL_RECIPIENTS = 20;

const eventListSchema = z
  .array(organizerEventSchema)
  .max(16)
  .transform((events) => [...new Set(events)]);

const minutesSchema = z
  .number()
  .int()
  .min(1, "must be at least 1 minute")
  .max(1440, "must be at most 1440 minutes (a day)");

export const updateAlertSettingsInputSchema = z.strictObject({
  emailRecipients: z
    .array(z.email("must be an e-mail address").max(254))
    .max(MAX_EMAIL_RECIPIENTS, `at most ${MAX_EMAIL_RECIPIENTS} recipients`)
    .transform((addresses) => [...new Set(addresses.map((address) => address.trim()))])
    .optional(),
  emailEvents: eventListSchema.optional(),
  stalledAfterMinutes: minutesSchema.optional(),
  auxSilentAfterMinutes: minutesSchema.optional(),
});

export type UpdateAlertSettingsInput = z.infer<typeof updateAlertSettingsInputSchema>;

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
    events: z.array(organizerEventSchema),
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
      events: z.array(organizerEventSchema),
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
