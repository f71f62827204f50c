import { z } from "zod";
import { organizerEventSchema } from "../alerts/alert-events.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { readAlertSettings, type AlertSettingsView } from "./read-alert-settings.ts";
import type { SessionUser } from "../records.ts";

/**
 * The organizer sets a run's e-mail alerts (who, for which events) and the thresholds of the
 * "run stalled" and "aux silent" alerts. Fields left out keep their values.
 */

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

export async function updateAlertSettings(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: UpdateAlertSettingsInput,
): Promise<AlertSettingsView> {
  await requireOrganizer(ctx, id, user);
  const data = {
    ...(input.emailRecipients === undefined
      ? {}
      : { emailRecipients: JSON.stringify(input.emailRecipients) }),
    ...(input.emailEvents === undefined ? {} : { emailEvents: JSON.stringify(input.emailEvents) }),
    ...(input.stalledAfterMinutes === undefined ? {} : { stalledAfterMinutes: input.stalledAfterMinutes }),
    ...(input.auxSilentAfterMinutes === undefined
      ? {}
      : { auxSilentAfterMinutes: input.auxSilentAfterMinutes }),
  };
  await ctx.db.alertSettings.upsert({
    where: { experimentId: id },
    create: { experimentId: id, ...data },
    update: data,
  });
  ctx.logger.info({ experimentId: id, fields: Object.keys(data) }, "alert settings changed");
  return readAlertSettings(ctx, user, id);
}
