import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { simpleParser } from "mailparser";
import { SMTPServer } from "smtp-server";
import { verifyWebhookSignature, type SignatureCheck } from "../../src/server/alerts/webhook-signature.ts";

/**
 * Real receivers for the alert tests, on loopback ports of their own: an SMTP server (smtp-server)
 * that keeps every message it accepts, parsed (mailparser), and an HTTP server that verifies each
 * webhook's signature and answers with the statuses it is told to.
 */

export interface ReceivedMail {
  readonly from: string;
  readonly to: string[];
  readonly subject: string;
  readonly text: string;
}

export interface MailReceiver {
  /** `smtp://127.0.0.1:<port>`, for BARNRAISE_SMTP_URL. */
  readonly url: string;
  readonly mails: ReceivedMail[];
  close(): Promise<void>;
}

/** An SMTP server on 127.0.0.1 (a free port), plain text, no authentication. */
export async function startMailReceiver(): Promise<MailReceiver> {
  const mails: ReceivedMail[] = [];
  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, session, callback) {
      // The message is parsed and kept before the server answers 250, so a sender that got its
      // answer finds the message here.
      simpleParser(stream)
        .then((parsed) => {
          mails.push({
            from: session.envelope.mailFrom === false ? "" : session.envelope.mailFrom.address,
            to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
            subject: parsed.subject ?? "",
            text: parsed.text ?? "",
          });
          callback();
        })
        .catch((error: unknown) => {
          callback(error instanceof Error ? error : new Error(String(error)));
        });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      resolve();
    });
  });
  const { port } = server.server.address() as AddressInfo;
  return {
    url: `smtp://127.0.0.1:${port}`,
    mails,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      }),
  };
}

export interface ReceivedWebhook {
  readonly headers: IncomingHttpHeaders;
  /** The raw body, as signed. */
  readonly body: string;
  /** The signature checked with the receiver's secret at the time `now()` gave. */
  readonly signature: SignatureCheck;
  /** The status the receiver answered. */
  readonly answered: number;
}

export interface WebhookReceiver {
  readonly url: string;
  readonly received: ReceivedWebhook[];
  /** The deliveries answered 2xx, with a valid signature, one per `Barnraise-Delivery` id. */
  accepted(): ReceivedWebhook[];
  /** The secret to verify with (the one the platform returned when the webhook was added). */
  secret: string;
  /** Statuses to answer, in order; 204 once they run out. */
  readonly statuses: number[];
  close(): Promise<void>;
}

/** An HTTP server on 127.0.0.1 (a free port) that receives webhooks; `now` is the clock signatures are checked at, in ms. */
export async function startWebhookReceiver(now: () => number = Date.now): Promise<WebhookReceiver> {
  const received: ReceivedWebhook[] = [];
  const receiver: Omit<WebhookReceiver, "url" | "close"> = {
    received,
    secret: "",
    statuses: [],
    accepted: () => {
      const seen = new Set<string>();
      return received.filter((hook) => {
        const id = String(hook.headers["barnraise-delivery"]);
        if (hook.answered >= 300 || !hook.signature.ok || seen.has(id)) return false;
        seen.add(id);
        return true;
      });
    },
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const signature = verifyWebhookSignature(
        receiver.secret,
        req.headers["barnraise-signature"] as string | undefined,
        body,
        Math.floor(now() / 1000),
      );
      const answered = signature.ok ? (receiver.statuses.shift() ?? 204) : 401;
      received.push({ headers: req.headers, body, signature, answered });
      res.writeHead(answered, { "content-type": "text/plain" });
      res.end(answered >= 300 ? `refused with ${answered}` : "");
    });
  });
  await new Promise<void>((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return Object.assign(receiver, {
    url: `http://127.0.0.1:${port}/hooks/barnraise`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  });
}
