import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { readAlertSettings, type AlertSettingsView } from "./read-alert-settings.ts";
import type { SessionUser } from "../records.ts";
import type { UpdateAlertSettingsInput } from "../../api/schemas/alerts.ts";

/**
 * The organizer sets a run's e-mail alerts (who, for which events) and the thresholds of the
 * "run stalled" and "aux silent" alerts. Fields left out keep their values.
 */

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
