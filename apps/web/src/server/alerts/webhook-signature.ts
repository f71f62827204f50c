import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Webhook signatures: HMAC-SHA256, keyed with the webhook's secret, over `<unix seconds>.<body>`,
 * sent as `Barnraise-Signature: t=<unix seconds>,v1=<hex>`. Signing the time with the body lets a
 * receiver refuse an old delivery replayed at it; `Barnraise-Delivery` (one id per event and target,
 * the same on every retry) lets it drop a duplicate. docs/alerts.md shows a receiver's side.
 */

export const SIGNATURE_HEADER = "Barnraise-Signature";
export const DELIVERY_HEADER = "Barnraise-Delivery";
export const EVENT_HEADER = "Barnraise-Event";

/** How far a signature's time may be from the receiver's clock by default, in seconds. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export function webhookSignature(secret: string, unixSeconds: number, body: string): string {
  const mac = createHmac("sha256", secret).update(`${unixSeconds}.`).update(body).digest("hex");
  return `t=${unixSeconds},v1=${mac}`;
}

export type SignatureCheck =
  | { readonly ok: true; readonly time: number }
  | { readonly ok: false; readonly reason: "malformed" | "mismatch" | "expired" };

/**
 * Checks a `Barnraise-Signature` header against the raw body as received (before any JSON parsing):
 * the MAC must match (compared in constant time) and its time lie within `toleranceSeconds` of
 * `nowSeconds`.
 */
export function verifyWebhookSignature(
  secret: string,
  header: string | null | undefined,
  body: string,
  nowSeconds: number,
  toleranceSeconds = DEFAULT_TOLERANCE_SECONDS,
): SignatureCheck {
  const fields = new Map(
    (header ?? "").split(",").map((part) => {
      const at = part.indexOf("=");
      return [part.slice(0, at).trim(), part.slice(at + 1).trim()] as const;
    }),
  );
  const timeText = fields.get("t");
  const mac = fields.get("v1");
  if (
    timeText === undefined ||
    mac === undefined ||
    !/^\d{1,12}$/.test(timeText) ||
    !/^[0-9a-f]{64}$/.test(mac)
  ) {
    return { ok: false, reason: "malformed" };
  }
  const time = Number(timeText);
  const expected = Buffer.from(webhookSignature(secret, time, body).slice(`t=${time},v1=`.length), "hex");
  if (!timingSafeEqual(expected, Buffer.from(mac, "hex"))) return { ok: false, reason: "mismatch" };
  if (Math.abs(nowSeconds - time) > toleranceSeconds) return { ok: false, reason: "expired" };
  return { ok: true, time };
}
