import { DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, webhookSignature } from "./webhook-signature.ts";

/**
 * One POST of an alert to a webhook: the JSON body, signed, with the delivery's id. An answer in
 * 200–299 delivers it; anything else, a redirect included (not followed), a timeout or a network
 * error is a failed attempt that the outbox retries. At most `MAX_RESPONSE_BYTES` of the answer are
 * read, for the delivery log.
 */

export const WEBHOOK_TIMEOUT_MS = 10_000;
export const MAX_RESPONSE_BYTES = 1024;

export interface WebhookRequest {
  readonly url: string;
  readonly secret: string;
  readonly deliveryId: string;
  readonly event: string;
  readonly body: string;
  /** The signature's time, Unix seconds. */
  readonly unixSeconds: number;
  readonly timeoutMs?: number;
}

export interface AttemptOutcome {
  readonly ok: boolean;
  /** The HTTP status, when an answer came. */
  readonly statusCode: number | null;
  /** For people: "HTTP 204", "HTTP 500: <first bytes of the answer>", or the error. */
  readonly result: string;
}

export async function sendWebhook(request: WebhookRequest): Promise<AttemptOutcome> {
  const url = new URL(request.url);
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.username !== "" || url.password !== "") {
    return { ok: false, statusCode: null, result: "refused: only http(s) URLs without credentials" };
  }
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      redirect: "manual",
      signal: AbortSignal.timeout(request.timeoutMs ?? WEBHOOK_TIMEOUT_MS),
      headers: {
        "content-type": "application/json",
        "user-agent": "Barnraise-Alerts/1",
        [SIGNATURE_HEADER]: webhookSignature(request.secret, request.unixSeconds, request.body),
        [DELIVERY_HEADER]: request.deliveryId,
        [EVENT_HEADER]: request.event,
      },
      body: request.body,
    });
  } catch (error) {
    return { ok: false, statusCode: null, result: describeFetchError(error) };
  }
  const excerpt = await readExcerpt(response).catch(() => "");
  const ok = response.status >= 200 && response.status < 300;
  const head = `HTTP ${response.status}`;
  return { ok, statusCode: response.status, result: ok || excerpt === "" ? head : `${head}: ${excerpt}` };
}

/** The answer's first bytes as one line of text; the rest is never read. */
async function readExcerpt(response: Response): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  while (total < MAX_RESPONSE_BYTES) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.byteLength;
  }
  await reader.cancel().catch(() => undefined);
  const bytes = Buffer.concat(chunks).subarray(0, MAX_RESPONSE_BYTES);
  return new TextDecoder().decode(bytes).replace(/\s+/g, " ").trim().slice(0, 200);
}

function describeFetchError(error: unknown): string {
  if (error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError")) {
    return "timed out";
  }
  const cause =
    error instanceof Error ? (error.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (typeof cause?.code === "string")
    return `${cause.code}${typeof cause.message === "string" ? `: ${cause.message}` : ""}`;
  return error instanceof Error ? error.message : String(error);
}
