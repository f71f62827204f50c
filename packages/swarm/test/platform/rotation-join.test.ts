import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keyPairFromSeed } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PassHolder } from "../../src/p2p/pass-holder.ts";
import {
  authorityPinFile,
  authorityPinPath,
  loadAuthorityPin,
  saveAuthorityPin,
} from "../../src/node/authority-pin-file.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { type JoinOptions, joinPlatform, peerToken } from "../../src/platform/join-client.ts";
import { JoinError, JoinErrorCode } from "../../src/platform/join-error.ts";
import { joinExperiment } from "../../src/platform/join-experiment.ts";
import { createPassRefresher } from "../../src/platform/pass-refresher.ts";
import { silentLogger, TestAuthority } from "../support/swarm-fixtures.ts";
import { FakePlatform, flipPayloadByte, TOKEN } from "./fake-platform.ts";

/**
 * Joining across a rotation of the authority key: a node that trusts an older key (pinned, or held
 * since it started) takes the key the platform returns only along rotation certificates chaining
 * from its own key, on a pass refresh and on a restart alike.
 */

const keyPair = keyPairFromSeed(new Uint8Array(32).fill(11));

let platform: FakePlatform;
let dir: string;
beforeEach(async () => {
  platform = await FakePlatform.start();
  dir = await mkdtemp(join(tmpdir(), "barnraise-rotation-join-"));
});
afterEach(async () => {
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

function options(extra: Partial<JoinOptions> = {}): JoinOptions {
  return { server: platform.url, credential: peerToken(TOKEN), keyPair, now: () => platform.now, ...extra };
}

async function failure(promise: Promise<unknown>): Promise<JoinError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  if (error instanceof JoinError) return error;
  throw new Error(`expected a JoinError, got ${String(error)}`);
}

describe("joining across a key rotation", () => {
  it("takes a rotated key whose certificates chain from the pinned one, and lists the rotations", async () => {
    const first = platform.authority.keyPair.publicKey;
    platform.authority.rotate(platform.now - 2_000);
    platform.authority.rotate(platform.now - 1_000);
    const joined = await joinPlatform(options({ pinnedAuthority: first }));
    expect(joined.authorityPublicKey).toEqual(platform.authority.keyPair.publicKey);
    expect(joined.authorityRotations.map((rotation) => rotation.keyVersion)).toEqual([2, 3]);
    expect(joined.authorityRotations[0]?.previousPublicKey).toEqual(first);
  });

  it("refuses a new key without certificates, with a forged one, or with a chain from another key (AUTHORITY_CHANGED)", async () => {
    const first = platform.authority.keyPair.publicKey;
    platform.authority.rotate(platform.now - 1_000);
    const certificate = platform.authority.certificates[0] ?? "";

    platform.handler = (call, p) => ({ body: { ...p.validResponse(call), authorityRotations: [] } });
    expect((await failure(joinPlatform(options({ pinnedAuthority: first })))).code).toBe(
      JoinErrorCode.AUTHORITY_CHANGED,
    );

    // One digit of the rotation time changed: the signature no longer holds.
    const forged = flipPayloadByte(
      certificate,
      (payload) => new TextDecoder().decode(payload).indexOf('"rotatedAt":') + 13,
    );
    platform.handler = (call, p) => ({ body: { ...p.validResponse(call), authorityRotations: [forged] } });
    const refused = await failure(joinPlatform(options({ pinnedAuthority: first })));
    expect(refused.code).toBe(JoinErrorCode.AUTHORITY_CHANGED);
    expect(refused.message).toMatch(/do not verify/);

    // An impostor that rotates its own key has a valid chain, but not from the key this node trusts.
    const impostor = new TestAuthority(platform.authority.experimentId);
    impostor.rotate(platform.now - 1_000);
    platform.handler = (call, p) => ({ body: p.validResponse(call, impostor) });
    expect((await failure(joinPlatform(options({ pinnedAuthority: first })))).code).toBe(
      JoinErrorCode.AUTHORITY_CHANGED,
    );

    // Without a pin, a certificate that does not verify makes the answer untrustworthy.
    platform.handler = (call, p) => ({ body: { ...p.validResponse(call), authorityRotations: [forged] } });
    expect((await failure(joinPlatform(options()))).code).toBe(JoinErrorCode.BAD_RESPONSE);
  });

  it("a pass refresh after a rotation follows it: the holder, the pin and the pass move to the new key", async () => {
    const first = await joinPlatform(options());
    const pinPath = join(dir, "authority-pin.json");
    await saveAuthorityPin(pinPath, {
      experimentId: first.experiment.id,
      authorityPublicKey: first.authorityPublicKey,
    });
    const authority = new AuthorityKeys({
      experimentId: first.experiment.id,
      publicKey: first.authorityPublicKey,
      pins: authorityPinFile(pinPath),
      now: () => platform.now,
      logger: silentLogger,
    });
    const holder = new PassHolder({
      initial: first.passToken,
      passes: authority.passVerifier(),
      refresh: createPassRefresher({ ...options(), authority }),
      logger: silentLogger,
      now: () => platform.now,
    });

    platform.now += 1_000;
    platform.authority.rotate(platform.now);
    platform.now += 1_000;
    const pass = await holder.refreshNow();
    expect(authority.publicKey).toEqual(platform.authority.keyPair.publicKey);
    expect(authority.passVerifier().signedByCurrentKey(pass.token)).toBe(true);
    await authority.pinned();
    expect((await loadAuthorityPin(pinPath))?.authorityPublicKey).toEqual(
      platform.authority.keyPair.publicKey,
    );
  });

  it("a node that restarts after a rotation it missed follows the chain from its pin, and re-pins", async () => {
    platform.now = Date.now();
    const identityPath = join(dir, "identity.json");
    const pinPath = authorityPinPath(identityPath);
    const start = () =>
      joinExperiment({
        server: platform.url,
        credential: peerToken(TOKEN),
        keyPair,
        pins: authorityPinFile(pinPath),
      });
    await start();
    const pinned = (await loadAuthorityPin(pinPath))?.authorityPublicKey;
    expect(pinned).toEqual(platform.authority.keyPair.publicKey);

    platform.authority.rotate(platform.now - 60_000);
    platform.authority.rotate(platform.now - 30_000);
    const joined = await start();
    expect(joined.authorityPublicKey).toEqual(platform.authority.keyPair.publicKey);
    expect((await loadAuthorityPin(pinPath))?.authorityPublicKey).toEqual(
      platform.authority.keyPair.publicKey,
    );

    // A key no certificate leads to from the pin is refused, naming the pin file.
    const impostor = new TestAuthority(platform.authority.experimentId);
    impostor.rotate(platform.now - 1_000);
    platform.handler = (call, p) => ({ body: p.validResponse(call, impostor) });
    const refused = await failure(start());
    expect(refused.code).toBe(JoinErrorCode.AUTHORITY_CHANGED);
    expect(refused.message).toContain(pinPath);
  });
});
