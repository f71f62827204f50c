import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  decodePublicKey,
  encodePublicKey,
  fromBase64Url,
  parseExperimentConfig,
  signExperimentConfig,
  toBase64Url,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * A real HTTP server on 127.0.0.1 playing the platform's `POST /api/v1/join`: by default it answers
 * like apps/web does, with a pass and config signed by a test authority key; each test can replace
 * the answer to play a failing, lying or tampering server.
 */

export const TOKEN = "brp_test-token-0123456789abcdefghijklmnopqrstuvw";
export const START = Date.UTC(2026, 0, 15, 9, 0, 0);
export const PASS_TTL_MS = 4 * 3600 * 1000;

export interface JoinCall {
  readonly method: string;
  readonly path: string;
  readonly contentType: string | undefined;
  readonly body: { token?: string; publicKey?: string };
}

export interface FakeAnswer {
  status?: number;
  headers?: Record<string, string>;
  /** Sent as JSON unless already a string or bytes. */
  body?: unknown;
}

export type FakeHandler = (call: JoinCall, platform: FakePlatform) => FakeAnswer | undefined;

export class FakePlatform {
  readonly authority = new TestAuthority("exp-join");
  readonly calls: JoinCall[] = [];
  /** The platform's clock (and the client's, in the tests). */
  now = START;
  configVersion = 3;
  handler: FakeHandler = () => undefined;
  readonly #server: Server;
  url = new URL("http://127.0.0.1/");

  private constructor(server: Server) {
    this.#server = server;
  }

  static async start(): Promise<FakePlatform> {
    const server = createServer();
    const platform = new FakePlatform(server);
    server.on("request", (req, res) => void platform.#serve(req, res));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    platform.url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    return platform;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) =>
      this.#server.close(() => {
        resolve();
      }),
    );
  }

  /** The answer apps/web gives a valid token: pass for the caller's key, signed config, one aux peer. */
  validResponse(call: JoinCall, authority: TestAuthority = this.authority) {
    const publicKey = decodePublicKey(call.body.publicKey ?? "");
    return {
      pass: authority.pass(
        { publicKey, secretKey: new Uint8Array(64) },
        { username: "alice", issuedAt: this.now, lifetimeMs: PASS_TTL_MS },
      ),
      passExpiresAt: new Date(this.now + PASS_TTL_MS).toISOString(),
      authorityPublicKey: encodePublicKey(authority.keyPair.publicKey),
      signedConfig: this.signedConfig(authority),
      initialPeers: ["/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWExample"],
      experiment: { id: authority.experimentId, name: "MNIST together" },
      authorityRotations: [...authority.certificates],
    };
  }

  signedConfig(authority: TestAuthority = this.authority, experimentId = authority.experimentId): string {
    return signExperimentConfig(nodeCrypto, authority.keyPair, {
      experimentId,
      version: this.configVersion,
      issuedAt: this.now,
      config: parseExperimentConfig({}),
    });
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body: JoinCall["body"] = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as JoinCall["body"];
    } catch {
      // Left empty: the default handler answers INVALID_INPUT.
    }
    const call: JoinCall = {
      method: req.method ?? "",
      path: req.url ?? "",
      contentType: req.headers["content-type"],
      body,
    };
    this.calls.push(call);
    const answer = this.handler(call, this) ?? this.#defaultAnswer(call);
    const payload =
      typeof answer.body === "string" || answer.body instanceof Uint8Array
        ? answer.body
        : JSON.stringify(answer.body ?? {});
    res.writeHead(answer.status ?? 200, { "content-type": "application/json", ...answer.headers });
    res.end(payload);
  }

  #defaultAnswer(call: JoinCall): FakeAnswer {
    if (call.body.token !== TOKEN) {
      return platformError(401, "TOKEN_INVALID", "the token is not a peer token on this platform");
    }
    return { body: this.validResponse(call) };
  }
}

/** The platform's error body. */
export function platformError(
  status: number,
  code: string,
  message = "refused",
  headers?: Record<string, string>,
) {
  return { status, body: { error: { code, message } }, ...(headers === undefined ? {} : { headers }) };
}

/** The token with one byte of its payload changed (still valid base64url, still the same length). */
export function flipPayloadByte(token: string, at: (payload: Uint8Array) => number): string {
  const [payloadText, signature] = token.split(".");
  if (payloadText === undefined || signature === undefined) throw new Error("not a token");
  const payload = fromBase64Url(payloadText, "payload");
  const index = at(payload);
  payload[index] = (payload[index] ?? 0) ^ 0x01;
  return `${toBase64Url(payload)}.${signature}`;
}

/** A port on 127.0.0.1 with nothing listening. */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) =>
    server.close(() => {
      resolve();
    }),
  );
  return port;
}
