import { z } from "zod";

/**
 * A user signed in to the platform through its real HTTP API, as a browser does: Auth.js's
 * credentials sign-in (GET /api/auth/csrf, then POST /api/auth/callback/credentials with the CSRF
 * cookie and token), then session-authenticated calls with the session cookie, same-origin and JSON
 * as the API requires. Used to revoke the peers' token and create a new one.
 */

const REQUEST_TIMEOUT_MS = 15_000;

const tokenSummarySchema = z.object({
  id: z.string(),
  label: z.string(),
  role: z.enum(["trainer", "aux"]),
  prefix: z.string(),
  revokedAt: z.string().nullable(),
});
export type TokenSummary = z.infer<typeof tokenSummarySchema>;
const tokenListSchema = z.object({ tokens: z.array(tokenSummarySchema) });
const createdTokenSchema = tokenSummarySchema.extend({ token: z.string() });
export type CreatedToken = z.infer<typeof createdTokenSchema>;

export class SessionClient {
  readonly #baseUrl: string;
  readonly #cookies = new Map<string, string>();

  private constructor(baseUrl: string) {
    this.#baseUrl = baseUrl;
  }

  /** Signs in with a username and password; rejects when the platform does not open a session. */
  static async signIn(baseUrl: string, username: string, password: string): Promise<SessionClient> {
    const client = new SessionClient(baseUrl);
    const csrf = await client.#request("GET", "/api/auth/csrf");
    const { csrfToken } = z.object({ csrfToken: z.string() }).parse(await csrf.json());
    const form = new URLSearchParams({ csrfToken, username, password, callbackUrl: baseUrl });
    const res = await client.#request("POST", "/api/auth/callback/credentials", {
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: form.toString(),
    });
    await res.body?.cancel();
    const session = await client.#request("GET", "/api/auth/session");
    const signedIn = z
      .object({ user: z.object({ username: z.string() }) })
      .nullable()
      .safeParse(await session.json());
    if (!signedIn.success || signedIn.data?.user.username !== username) {
      throw new Error(`signing in as ${username} failed (HTTP ${res.status} from the credentials callback)`);
    }
    return client;
  }

  /** The user's own tokens for the experiment. */
  async tokens(experimentId: string): Promise<TokenSummary[]> {
    const res = await this.#api("GET", `/api/v1/experiments/${experimentId}/tokens`);
    return tokenListSchema.parse(await res.json()).tokens;
  }

  async createToken(experimentId: string, label: string): Promise<CreatedToken> {
    const res = await this.#api("POST", `/api/v1/experiments/${experimentId}/tokens`, { label }, 201);
    return createdTokenSchema.parse(await res.json());
  }

  async revokeToken(experimentId: string, tokenId: string): Promise<void> {
    const res = await this.#api(
      "DELETE",
      `/api/v1/experiments/${experimentId}/tokens/${tokenId}`,
      undefined,
      204,
    );
    await res.body?.cancel();
  }

  async #api(method: string, path: string, body?: unknown, expected = 200): Promise<Response> {
    const res = await this.#request(method, path, {
      headers: {
        origin: this.#baseUrl,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (res.status !== expected) {
      throw new Error(`${method} ${path}: HTTP ${res.status} ${await res.text()} (expected ${expected})`);
    }
    return res;
  }

  /** One request with the cookies collected so far; keeps the cookies it sets; never follows redirects. */
  async #request(
    method: string,
    path: string,
    { headers = {}, body }: { headers?: Record<string, string>; body?: string } = {},
  ): Promise<Response> {
    const cookie = [...this.#cookies].map(([name, value]) => `${name}=${value}`).join("; ");
    const res = await fetch(`${this.#baseUrl}${path}`, {
      method,
      headers: { ...headers, ...(cookie === "" ? {} : { cookie }) },
      ...(body === undefined ? {} : { body }),
      redirect: "manual",
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    for (const set of res.headers.getSetCookie()) {
      const [pair] = set.split(";");
      const at = pair?.indexOf("=") ?? -1;
      if (pair !== undefined && at > 0) this.#cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
    return res;
  }
}
