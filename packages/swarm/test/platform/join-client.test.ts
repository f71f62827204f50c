import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { encodePublicKey, keyPairFromSeed, parseExperimentConfig } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type JoinOptions,
  joinPlatform,
  joinUrl,
  MAX_JOIN_RESPONSE_BYTES,
  peerToken,
} from "../../src/platform/join-client.ts";
import { JoinError, JoinErrorCode } from "../../src/platform/join-error.ts";
import { TestAuthority } from "../support/swarm-fixtures.ts";
import {
  closedPort,
  FakePlatform,
  flipPayloadByte,
  PASS_TTL_MS,
  platformError,
  START,
  TOKEN,
} from "./fake-platform.ts";

const keyPair = keyPairFromSeed(new Uint8Array(32).fill(7));
const otherKey = keyPairFromSeed(new Uint8Array(32).fill(9));

let platform: FakePlatform;
beforeEach(async () => {
  platform = await FakePlatform.start();
});
afterEach(async () => {
  await platform.close();
});

function options(extra: Partial<JoinOptions> = {}): JoinOptions {
  return { server: platform.url, credential: peerToken(TOKEN), keyPair, now: () => platform.now, ...extra };
}

/** The JoinError that `promise` rejects with. */
async function failure(promise: Promise<unknown>): Promise<JoinError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof JoinError) return error;
    throw error;
  }
  throw new Error("expected the join to fail");
}

describe("joinPlatform", () => {
  it("posts the token and key to /api/v1/join and returns the verified experiment", async () => {
    const joined = await joinPlatform(options());

    expect(platform.calls).toHaveLength(1);
    expect(platform.calls[0]).toMatchObject({
      method: "POST",
      path: "/api/v1/join",
      contentType: "application/json",
      body: { token: TOKEN, publicKey: encodePublicKey(keyPair.publicKey) },
    });
    expect(joined.experiment).toEqual({ id: "exp-join", name: "MNIST together" });
    expect(joined.authorityPublicKey).toEqual(platform.authority.keyPair.publicKey);
    expect(joined.pass).toMatchObject({ experimentId: "exp-join", username: "alice", role: "trainer" });
    expect(joined.pass.peerPublicKey).toEqual(keyPair.publicKey);
    expect(joined.passToken).toBe(joined.pass.token);
    expect(joined.passExpiresAt).toBe(START + PASS_TTL_MS);
    expect(joined.config).toEqual(parseExperimentConfig({}));
    expect(joined.configVersion).toBe(3);
    expect(joined.initialPeers).toEqual(["/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWExample"]);
  });

  it("keeps a path prefix of the server URL", async () => {
    await joinPlatform(options({ server: new URL("barnraise", platform.url) }));
    expect(platform.calls[0]?.path).toBe("/barnraise/api/v1/join");
    expect(joinUrl(new URL("https://example.org/x/?q=1#h"), peerToken(TOKEN)).href).toBe(
      "https://example.org/x/api/v1/join",
    );
    expect(() => joinUrl(new URL("file:///etc/passwd"), peerToken(TOKEN))).toThrow(/http/);
  });

  it("joins with a browser's session: its experiment's browser-join route, no token in the body", async () => {
    platform.handler = (call, p) => ({ body: p.validResponse(call) });
    const joined = await joinPlatform(options({ credential: { kind: "session", experimentId: "exp-join" } }));

    expect(platform.calls[0]).toMatchObject({
      method: "POST",
      path: "/api/v1/experiments/exp-join/browser-join",
      body: { publicKey: encodePublicKey(keyPair.publicKey) },
    });
    expect(platform.calls[0]?.body).not.toHaveProperty("token");
    expect(joined.experiment.id).toBe("exp-join");
    expect(joinUrl(new URL("https://example.org/x/"), { kind: "session", experimentId: "a/b" }).href).toBe(
      "https://example.org/x/api/v1/experiments/a%2Fb/browser-join",
    );
  });

  it("refuses a session's join answered for another experiment than the one it asked for", async () => {
    platform.handler = (call, p) => ({ body: p.validResponse(call) });
    const error = await failure(
      joinPlatform(options({ credential: { kind: "session", experimentId: "exp-other" } })),
    );
    expect(error.code).toBe(JoinErrorCode.AUTHORITY_CHANGED);
  });

  it("refuses an empty token without asking the server", async () => {
    expect((await failure(joinPlatform(options({ credential: peerToken(" ") })))).code).toBe(
      JoinErrorCode.TOKEN_INVALID,
    );
    expect(platform.calls).toHaveLength(0);
  });

  describe("refuses what does not verify", () => {
    it("CONFIG_TAMPERED: one byte of the signed config changed", async () => {
      const positions: ((payload: Uint8Array) => number)[] = [
        // A digit inside the config (the JSON stays valid and canonical: only the signature catches it).
        (payload) => new TextDecoder().decode(payload).search(/"version":\d/) + '"version":'.length,
        (payload) => Math.floor(payload.length / 2),
        () => 0,
      ];
      for (const at of positions) {
        platform.handler = (call, p) => ({
          body: { ...p.validResponse(call), signedConfig: flipPayloadByte(p.signedConfig(), at) },
        });
        const error = await failure(joinPlatform(options()));
        expect(error.code).toBe(JoinErrorCode.CONFIG_TAMPERED);
        expect(error.retryable).toBe(false);
      }
    });

    it("CONFIG_TAMPERED: a config signed by another key, or for another experiment", async () => {
      const stranger = new TestAuthority("exp-join");
      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), signedConfig: p.signedConfig(stranger) },
      });
      expect((await failure(joinPlatform(options()))).code).toBe(JoinErrorCode.CONFIG_TAMPERED);

      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), signedConfig: p.signedConfig(p.authority, "exp-other") },
      });
      const error = await failure(joinPlatform(options()));
      expect(error.code).toBe(JoinErrorCode.CONFIG_TAMPERED);
      expect(error.message).toMatch(/CONFIG_WRONG_EXPERIMENT/);
    });

    it("PASS_INVALID: a pass for another node's key", async () => {
      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), pass: p.authority.pass(otherKey, { issuedAt: p.now }) },
      });
      const error = await failure(joinPlatform(options()));
      expect(error.code).toBe(JoinErrorCode.PASS_INVALID);
      expect(error.message).toMatch(/another node's key/);
    });

    it("PASS_INVALID: a pass signed by another key", async () => {
      const stranger = new TestAuthority("exp-join");
      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), pass: stranger.pass(keyPair, { issuedAt: p.now }) },
      });
      expect((await failure(joinPlatform(options()))).message).toMatch(/PASS_BAD_SIGNATURE/);
    });

    it("PASS_INVALID: an expired pass, or one from the future, with a hint about the clock", async () => {
      platform.handler = (call, p) => ({
        body: {
          ...p.validResponse(call),
          pass: p.authority.pass(keyPair, { issuedAt: p.now - 2000, lifetimeMs: 1000 }),
        },
      });
      const expired = await failure(joinPlatform(options()));
      expect(expired.code).toBe(JoinErrorCode.PASS_INVALID);
      expect(expired.message).toMatch(/PASS_EXPIRED.*clock/);

      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), pass: p.authority.pass(keyPair, { issuedAt: p.now + 3_600_000 }) },
      });
      expect((await failure(joinPlatform(options()))).message).toMatch(/PASS_NOT_YET_VALID/);
    });

    it("PASS_INVALID: the response names another experiment than the pass", async () => {
      platform.handler = (call, p) => ({
        body: { ...p.validResponse(call), experiment: { id: "exp-other", name: "Other" } },
      });
      const error = await failure(joinPlatform(options()));
      expect(error.code).toBe(JoinErrorCode.PASS_INVALID);
      expect(error.message).toMatch(/another experiment/);
    });
  });

  describe("authority pinning", () => {
    it("accepts the pinned key and refuses another, even when everything is consistently signed by it", async () => {
      await expect(
        joinPlatform(options({ pinnedAuthority: platform.authority.keyPair.publicKey })),
      ).resolves.toBeDefined();

      const impostor = new TestAuthority("exp-join");
      platform.handler = (call, p) => ({ body: p.validResponse(call, impostor) });
      // Without a pin this is trust on first use: the impostor's answer is self-consistent.
      await expect(joinPlatform(options())).resolves.toMatchObject({
        authorityPublicKey: impostor.keyPair.publicKey,
      });
      const error = await failure(
        joinPlatform(options({ pinnedAuthority: platform.authority.keyPair.publicKey })),
      );
      expect(error.code).toBe(JoinErrorCode.AUTHORITY_CHANGED);
      expect(error.retryable).toBe(false);
    });

    it("refuses another experiment than the expected one", async () => {
      const error = await failure(joinPlatform(options({ experimentId: "exp-before" })));
      expect(error.code).toBe(JoinErrorCode.AUTHORITY_CHANGED);
      expect(error.message).toMatch(/exp-before.*exp-join/);
    });
  });

  describe("maps the platform's refusals", () => {
    const cases: [number, string, JoinErrorCode, RegExp][] = [
      [401, "TOKEN_INVALID", JoinErrorCode.TOKEN_INVALID, /create a new token/],
      [401, "TOKEN_REVOKED", JoinErrorCode.TOKEN_REVOKED, /create a new token/],
      [
        403,
        "NOT_ALLOWLISTED",
        JoinErrorCode.NOT_ALLOWLISTED,
        /ask the organizer to add you to the allowlist/,
      ],
      [403, "FORBIDDEN", JoinErrorCode.NOT_ALLOWLISTED, /new aux token/],
      [403, "BANNED", JoinErrorCode.BANNED, /banned/],
      [409, "EXPERIMENT_PAUSED", JoinErrorCode.EXPERIMENT_PAUSED, /paused/],
      [409, "CONFLICT", JoinErrorCode.KEY_CONFLICT, /another identity file/],
      [409, "TOO_MANY_NODES", JoinErrorCode.TOO_MANY_NODES, /retire a machine you no longer use/],
      [403, "NODE_RETIRED", JoinErrorCode.NODE_RETIRED, /new identity/],
      [401, "UNAUTHENTICATED", JoinErrorCode.SIGNED_OUT, /sign in again/],
      [400, "INVALID_INPUT", JoinErrorCode.SERVER_ERROR, /different versions/],
      [404, "NOT_FOUND", JoinErrorCode.SERVER_ERROR, /--server/],
      [418, "SOMETHING_NEW", JoinErrorCode.SERVER_ERROR, /418 SOMETHING_NEW/],
    ];
    it.each(cases)("%i %s → %s, not retryable", async (status, code, expected, message) => {
      platform.handler = () => platformError(status, code, "why");
      const error = await failure(joinPlatform(options()));
      expect(error).toMatchObject({ code: expected, retryable: false, status, platformCode: code });
      expect(error.message).toMatch(message);
      expect(error.message).toMatch(/server said: why/);
    });

    it("INVALID_INPUT about the token → TOKEN_INVALID", async () => {
      platform.handler = () => ({
        status: 400,
        body: {
          error: { code: "INVALID_INPUT", message: "bad", issues: [{ path: "token", message: "too long" }] },
        },
      });
      expect((await failure(joinPlatform(options()))).code).toBe(JoinErrorCode.TOKEN_INVALID);
    });

    it("429 and 5xx are retryable SERVER_ERRORs that carry Retry-After", async () => {
      platform.handler = () => platformError(429, "RATE_LIMITED", "slow down", { "retry-after": "7" });
      expect(await failure(joinPlatform(options()))).toMatchObject({
        code: JoinErrorCode.SERVER_ERROR,
        retryable: true,
        retryAfterMs: 7000,
        status: 429,
      });
      const at = new Date(START + 12_000).toUTCString();
      platform.handler = () => ({
        status: 503,
        headers: { "retry-after": at, "content-type": "text/html" },
        body: "<h1>down</h1>",
      });
      expect(await failure(joinPlatform(options()))).toMatchObject({
        retryable: true,
        retryAfterMs: 12_000,
        status: 503,
      });
      platform.handler = () => ({ status: 500, body: "oops" });
      expect(await failure(joinPlatform(options()))).toMatchObject({
        code: JoinErrorCode.SERVER_ERROR,
        retryable: true,
      });
    });

    it("does not follow a redirect with the token", async () => {
      const elsewhere = await FakePlatform.start();
      try {
        platform.handler = () => ({
          status: 307,
          headers: { location: new URL("api/v1/join", elsewhere.url).href },
        });
        const error = await failure(joinPlatform(options()));
        expect(error.code).toBe(JoinErrorCode.SERVER_ERROR);
        expect(error.message).toMatch(/redirects/);
        expect(elsewhere.calls).toHaveLength(0);
      } finally {
        await elsewhere.close();
      }
    });
  });

  describe("network failures and bad answers", () => {
    it("SERVER_UNREACHABLE (retryable) when the connection is refused", async () => {
      const port = await closedPort();
      const error = await failure(joinPlatform(options({ server: new URL(`http://127.0.0.1:${port}/`) })));
      expect(error).toMatchObject({ code: JoinErrorCode.SERVER_UNREACHABLE, retryable: true });
      expect(error.message).toMatch(/ECONNREFUSED/);
    });

    it("SERVER_UNREACHABLE on timeout, ABORTED when the caller cancels", async () => {
      const hanging = createServer(() => undefined);
      await new Promise<void>((resolve) => hanging.listen(0, "127.0.0.1", resolve));
      const server = new URL(`http://127.0.0.1:${(hanging.address() as AddressInfo).port}/`);
      try {
        const timedOut = await failure(joinPlatform(options({ server, timeoutMs: 50 })));
        expect(timedOut).toMatchObject({ code: JoinErrorCode.SERVER_UNREACHABLE, retryable: true });
        expect(timedOut.message).toMatch(/timed out/);

        const controller = new AbortController();
        const pending = joinPlatform(options({ server, signal: controller.signal }));
        controller.abort(new Error("SIGINT"));
        expect(await failure(pending)).toMatchObject({ code: JoinErrorCode.ABORTED, retryable: false });
        expect(await failure(joinPlatform(options({ signal: AbortSignal.abort() })))).toMatchObject({
          code: JoinErrorCode.ABORTED,
        });
      } finally {
        hanging.closeAllConnections();
        await new Promise<void>((resolve) =>
          hanging.close(() => {
            resolve();
          }),
        );
      }
    });

    it("BAD_RESPONSE for malformed JSON, missing fields or an unusable authority key", async () => {
      const bodies: unknown[] = [
        "{not json",
        "",
        [],
        { pass: "x" },
        (call: Parameters<FakePlatform["validResponse"]>[0]) => ({
          ...platform.validResponse(call),
          initialPeers: "nope",
        }),
        (call: Parameters<FakePlatform["validResponse"]>[0]) => ({
          ...platform.validResponse(call),
          authorityPublicKey: encodePublicKey(new Uint8Array(32)),
        }),
      ];
      for (const body of bodies) {
        platform.handler = (call) => ({
          body: typeof body === "function" ? (body as (c: typeof call) => unknown)(call) : body,
        });
        const error = await failure(joinPlatform(options()));
        expect(error.code, JSON.stringify(body)).toBe(JoinErrorCode.BAD_RESPONSE);
        expect(error.retryable).toBe(false);
      }
    });

    it("BAD_RESPONSE for an answer over 1 MiB, declared or streamed", async () => {
      const huge = `{"pass":"${"a".repeat(MAX_JOIN_RESPONSE_BYTES)}"}`;
      platform.handler = () => ({ body: huge, headers: { "content-length": String(huge.length) } });
      expect((await failure(joinPlatform(options()))).message).toMatch(/larger than/);
      // No Content-Length: the limit applies while streaming.
      platform.handler = () => ({ body: huge });
      const streamed = await failure(joinPlatform(options()));
      expect(streamed.code).toBe(JoinErrorCode.BAD_RESPONSE);
      expect(streamed.message).toMatch(/larger than/);
    });
  });
});
