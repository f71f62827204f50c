import { lookup, type LookupAddress, type LookupOptions } from "node:dns";
import { isIP } from "node:net";
import ipaddr from "ipaddr.js";
import { Agent, fetch, type Response } from "undici";
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
  /**
   * Whether the URL may lead to a loopback, private, link-local or otherwise non-public address
   * (BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES). Refused by default: anyone who may organize a run could
   * otherwise make the platform probe its own network (cloud metadata services included).
   */
  readonly privateAddresses: "refuse" | "allow";
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
  if (request.privateAddresses === "refuse") {
    // A literal address is connected to without a lookup, so it is checked here.
    const literal = url.hostname.replace(/^\[|\]$/g, "");
    if (isIP(literal) !== 0 && !isPublicAddress(literal)) {
      return { ok: false, statusCode: null, result: privateAddressRefusal(literal) };
    }
  }
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      redirect: "manual",
      dispatcher: request.privateAddresses === "refuse" ? publicOnly() : undefined,
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
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
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

/** Whether `address` is a public unicast address (an IPv4-mapped IPv6 address judged as IPv4). */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === "ipv6" && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  return parsed.range() === "unicast";
}

function privateAddressRefusal(address: string): string {
  return (
    `refused: ${address} is not a public address ` +
    "(BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES=allow lets webhooks reach the platform's own network)"
  );
}

class PrivateAddressError extends Error {
  readonly code = "EPRIVATEADDRESS";
}

/**
 * Looks names up as usual and refuses the connection when any address is not public. The check is
 * made on the addresses the connection then uses, so a name that changes its answer between a check
 * and the connection (DNS rebinding) cannot slip through.
 */
function publicLookup(
  hostname: string,
  options: LookupOptions,
  callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void,
): void {
  lookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error !== null) {
      callback(error, []);
      return;
    }
    const refused = addresses.find((entry) => !isPublicAddress(entry.address));
    if (refused !== undefined) {
      callback(new PrivateAddressError(privateAddressRefusal(`${hostname} (${refused.address})`)), []);
      return;
    }
    const [first] = addresses;
    if (options.all === true) callback(null, addresses);
    else if (first === undefined) callback(new Error(`${hostname} has no address`), []);
    else callback(null, first.address, first.family);
  });
}

let publicOnlyAgent: Agent | undefined;

/** The connection pool for webhooks that may reach public addresses only. */
function publicOnly(): Agent {
  publicOnlyAgent ??= new Agent({ connect: { lookup: publicLookup } });
  return publicOnlyAgent;
}

function describeFetchError(error: unknown): string {
  if (error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError")) {
    return "timed out";
  }
  const cause =
    error instanceof Error ? (error.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (cause instanceof PrivateAddressError) return cause.message;
  if (typeof cause?.code === "string")
    return `${cause.code}${typeof cause.message === "string" ? `: ${cause.message}` : ""}`;
  return error instanceof Error ? error.message : String(error);
}
