import type { AlertPayload } from "./alert-events.ts";
import type { MailMessage } from "./mailer.ts";

/** An alert as an e-mail: the summary as subject and first line, then each detail, then the run's link. */
export function alertMail(to: string, payload: AlertPayload): MailMessage {
  const lines = [payload.summary, ""];
  for (const [key, value] of Object.entries(payload.details)) lines.push(`${key}: ${String(value)}`);
  if (Object.keys(payload.details).length > 0) lines.push("");
  lines.push(`Experiment: ${payload.experiment.name} (${payload.experiment.id})`);
  if (payload.experiment.url !== null) lines.push(payload.experiment.url);
  lines.push(`Time: ${payload.time}`, `Event: ${payload.type} (${payload.id})`);
  return { to, subject: `[Barnraise] ${payload.summary}`, text: `${lines.join("\n")}\n` };
}
