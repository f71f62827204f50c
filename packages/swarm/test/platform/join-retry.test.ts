import { keyPairFromSeed } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JoinError, JoinErrorCode } from "../../src/platform/join-error.ts";
import {
  abortableSleep,
  joinWithRetry,
  retryDelayMs,
  type JoinRetryOptions,
} from "../../src/platform/join-retry.ts";
import { closedPort, FakePlatform, platformError, TOKEN } from "./fake-platform.ts";
import { peerToken } from "../../src/platform/join-client.ts";

const keyPair = keyPairFromSeed(new Uint8Array(32).fill(3));

let platform: FakePlatform;
beforeEach(async () => {
  platform = await FakePlatform.start();
});
afterEach(async () => {
  await platform.close();
});

/** Options whose sleep only advances the platform's clock, recording each wait and retry. */
function retrying(extra: Partial<JoinRetryOptions> = {}) {
  const sleeps: number[] = [];
  const retries: { attempt: number; delayMs: number; code: string }[] = [];
  const options: JoinRetryOptions = {
    server: platform.url,
    credential: peerToken(TOKEN),
    keyPair,
    now: () => platform.now,
    random: () => 0.5,
    sleep: (ms) => {
      sleeps.push(ms);
      platform.now += ms;
      return Promise.resolve();
    },
    onRetry: (attempt, delayMs, error) => retries.push({ attempt, delayMs, code: error.code }),
    ...extra,
  };
  return { options, sleeps, retries };
}

async function failure(promise: Promise<unknown>): Promise<JoinError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof JoinError) return error;
    throw error;
  }
  throw new Error("expected the join to fail");
}

describe("joinWithRetry", () => {
  it("retries 503 with doubling, jittered waits, then succeeds", async () => {
    let failures = 2;
    platform.handler = () => (failures-- > 0 ? platformError(503, "INTERNAL", "restarting") : undefined);
    const { options, sleeps, retries } = retrying();

    const joined = await joinWithRetry(options);
    expect(joined.experiment.id).toBe("exp-join");
    expect(platform.calls).toHaveLength(3);
    // random = 0.5: a wait is 3/4 of the nominal 1 s, 2 s …
    expect(sleeps).toEqual([750, 1500]);
    expect(retries).toEqual([
      { attempt: 1, delayMs: 750, code: JoinErrorCode.SERVER_ERROR },
      { attempt: 2, delayMs: 1500, code: JoinErrorCode.SERVER_ERROR },
    ]);
    // The pass is verified against the clock at the successful attempt.
    expect(joined.pass.issuedAt).toBe(platform.now);
  });

  it("throws a refusal at once, without waiting", async () => {
    for (const [status, code] of [
      [403, "NOT_ALLOWLISTED"],
      [401, "TOKEN_INVALID"],
      [409, "EXPERIMENT_PAUSED"],
    ] as const) {
      platform.calls.length = 0;
      platform.handler = () => platformError(status, code);
      const { options, sleeps } = retrying();
      expect((await failure(joinWithRetry(options))).platformCode).toBe(code);
      expect(platform.calls).toHaveLength(1);
      expect(sleeps).toEqual([]);
    }
  });

  it("throws a verification failure at once", async () => {
    platform.handler = (call, p) => ({ body: { ...p.validResponse(call), signedConfig: "garbage.garbage" } });
    const { options, sleeps } = retrying();
    expect((await failure(joinWithRetry(options))).code).toBe(JoinErrorCode.CONFIG_TAMPERED);
    expect(sleeps).toEqual([]);
  });

  it("keeps trying an unreachable server, capped at maxDelayMs, until giveUpAfterMs", async () => {
    const port = await closedPort();
    const { options, sleeps, retries } = retrying({
      server: new URL(`http://127.0.0.1:${port}/`),
      random: () => 1 - 1e-12,
      giveUpAfterMs: 100_000,
    });
    const error = await failure(joinWithRetry(options));
    expect(error).toMatchObject({ code: JoinErrorCode.SERVER_UNREACHABLE, retryable: true });
    expect(sleeps).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    expect(retries).toHaveLength(sleeps.length);
    expect(sleeps.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(100_000);
  });

  it("waits at least as long as the server's Retry-After", async () => {
    let failures = 1;
    platform.handler = () =>
      failures-- > 0 ? platformError(429, "RATE_LIMITED", "slow down", { "retry-after": "45" }) : undefined;
    const { options, sleeps } = retrying();
    await joinWithRetry(options);
    expect(sleeps).toEqual([45_000]);
  });

  it("stops with ABORTED when cancelled while waiting", async () => {
    platform.handler = () => platformError(503, "INTERNAL");
    const controller = new AbortController();
    const error = await failure(
      joinWithRetry({
        ...retrying().options,
        signal: controller.signal,
        sleep: abortableSleep,
        onRetry: () => {
          controller.abort(new Error("SIGINT"));
        },
      }),
    );
    expect(error.code).toBe(JoinErrorCode.ABORTED);
    expect(platform.calls).toHaveLength(1);
  });
});

describe("retryDelayMs", () => {
  const error = new JoinError(JoinErrorCode.SERVER_UNREACHABLE, "down", { retryable: true });
  it("doubles from the initial delay to the cap, jittered within [nominal/2, nominal]", () => {
    expect([1, 2, 3, 6, 7, 60].map((n) => retryDelayMs(n, error, { random: () => 0 }))).toEqual([
      500, 1000, 2000, 15000, 15000, 15000,
    ]);
    expect([1, 2, 3, 6, 7, 60].map((n) => retryDelayMs(n, error, { random: () => 0.9999999 }))).toEqual([
      1000, 2000, 4000, 30000, 30000, 30000,
    ]);
    expect(retryDelayMs(3, error, { random: () => 1 - 1e-9, initialDelayMs: 100, maxDelayMs: 250 })).toBe(
      250,
    );
  });
});
