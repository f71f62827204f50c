import { createTransport } from "nodemailer";

/**
 * Alert e-mail. The platform sends through the SMTP server of BARNRAISE_SMTP_URL (nodemailer), as
 * BARNRAISE_MAIL_FROM; without them it has no mailer and queues no e-mail. A test can put any Mailer
 * in the context.
 */

export interface MailMessage {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

export interface Mailer {
  /** Sends one message; resolves to the server's reply (e.g. "250 OK: queued") or throws. */
  send(message: MailMessage): Promise<string>;
}

const TIMEOUT_MS = 15_000;

export function createSmtpMailer(smtp: { readonly url: string; readonly from: string }): Mailer {
  const transport = createTransport({
    url: smtp.url,
    connectionTimeout: TIMEOUT_MS,
    greetingTimeout: TIMEOUT_MS,
    socketTimeout: TIMEOUT_MS,
  });
  return {
    async send(message) {
      const info = await transport.sendMail({
        from: smtp.from,
        to: message.to,
        subject: message.subject,
        text: message.text,
      });
      return info.response;
    },
  };
}
