import { keyPairFromSeed } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PassHolder } from "../../src/p2p/pass-holder.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { joinPlatform, peerToken } from "../../src/platform/join-client.ts";
import { JoinError, JoinErrorCode } from "../../src/platform/join-error.ts";
import type { JoinedExperiment } from "../../src/platform/join-response.ts";
import { createPassRefresher } from "../../src/platform/pass-refresher.ts";
import { silentLogger, TestAuthority } from "../support/swarm-fixtures.ts";
import { FakePlatform, TOKEN } from "./fake-platform.ts";

const keyPair = keyPairFromSeed(new Uint8Array(32).fill(5));

let platform: FakePlatform;
beforeEach(async () => {
  platform = await FakePlatform.start();
});
afterEach(async () => {
  await platform.close();
});

describe("createPassRefresher", () => {
  it("gives PassHolder a fresh pass from a new join and reports the new join", async () => {
    const base = { server: platform.url, credential: peerToken(TOKEN), keyPair, now: () => platform.now };
    const first = await joinPlatform(base);
    const seen: JoinedExperiment[] = [];
    const authority = AuthorityKeys.fromJoin(first);
    const refresh = createPassRefresher({ ...base, authority, onJoined: (joined) => seen.push(joined) });
    const holder = new PassHolder({
      initial: first.passToken,
      passes: authority.passVerifier(),
      refresh,
      logger: silentLogger,
      now: () => platform.now,
    });

    platform.now += 3 * 3600 * 1000;
    platform.configVersion = 4;
    const pass = await holder.refreshNow();
    expect(pass.token).not.toBe(first.passToken);
    expect(pass.issuedAt).toBe(platform.now);
    expect(holder.token()).toBe(pass.token);
    expect(seen.map((joined) => joined.configVersion)).toEqual([4]);
    expect(platform.calls).toHaveLength(2);
  });

  it("refuses a refresh that changes the authority key or the experiment", async () => {
    const base = { server: platform.url, credential: peerToken(TOKEN), keyPair, now: () => platform.now };
    const first = await joinPlatform(base);
    const refresh = createPassRefresher({ ...base, authority: AuthorityKeys.fromJoin(first) });

    const impostor = new TestAuthority("exp-join");
    platform.handler = (call, p) => ({ body: p.validResponse(call, impostor) });
    await expect(refresh()).rejects.toSatisfy(
      (error) => error instanceof JoinError && error.code === JoinErrorCode.AUTHORITY_CHANGED,
    );

    // Same key, another experiment: a pass for it must not replace this node's.
    const moved = new TestAuthority("exp-elsewhere");
    Object.assign(moved, { keyPair: platform.authority.keyPair });
    platform.handler = (call, p) => ({ body: p.validResponse(call, moved) });
    await expect(refresh()).rejects.toSatisfy(
      (error) =>
        error instanceof JoinError &&
        error.code === JoinErrorCode.AUTHORITY_CHANGED &&
        /exp-elsewhere/.test(error.message),
    );
  });

  it("tells onRefused of a refusal for good, not of a platform that is merely unreachable", async () => {
    const base = { server: platform.url, credential: peerToken(TOKEN), keyPair, now: () => platform.now };
    const first = await joinPlatform(base);
    const refusals: JoinError[] = [];
    const failing = (code: JoinErrorCode) =>
      createPassRefresher({
        ...base,
        authority: AuthorityKeys.fromJoin(first),
        onRefused: (error) => refusals.push(error),
        join: () => Promise.reject(new JoinError(code, code)),
      });
    await expect(failing(JoinErrorCode.SERVER_UNREACHABLE)()).rejects.toMatchObject({
      code: JoinErrorCode.SERVER_UNREACHABLE,
    });
    expect(refusals).toEqual([]);
    await expect(failing(JoinErrorCode.BANNED)()).rejects.toMatchObject({ code: JoinErrorCode.BANNED });
    expect(refusals.map((error) => error.code)).toEqual([JoinErrorCode.BANNED]);
  });
});
