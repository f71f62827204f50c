import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  canonicalJson,
  generateKeyPair,
  signAuthorityRotation,
  toBase64Url,
  verifyAuthorityRotation,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  AUTHORITY_PIN_FILE,
  authorityPinFile,
  loadAuthorityPin,
  saveAuthorityPin,
} from "../../src/node/authority-pin-file.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { silentLogger, TestAuthority } from "../support/swarm-fixtures.ts";

const START = Date.UTC(2026, 11, 1, 12, 0, 0);
const GRACE = 60_000;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-authority-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** An authority, a node's holder of its first key (pinned in `dir`), and a clock. */
async function world() {
  const authority = new TestAuthority("exp-rot");
  const clock = { now: START };
  const pinPath = join(dir, AUTHORITY_PIN_FILE);
  await saveAuthorityPin(pinPath, {
    experimentId: authority.experimentId,
    authorityPublicKey: authority.keyPair.publicKey,
  });
  const keys = authority.keys({
    pins: authorityPinFile(pinPath),
    graceMs: GRACE,
    now: () => clock.now,
    logger: silentLogger,
  });
  const first = authority.keyPair;
  return { authority, clock, pinPath, keys, first };
}

describe("AuthorityKeys", () => {
  it("follows a chain of two rotations to the newest key, tells listeners, and re-pins", async () => {
    const { authority, keys, pinPath, first } = await world();
    const heard: number[][] = [];
    keys.onRotation((latest, chain) =>
      heard.push([latest.keyVersion, ...chain.map((rotation) => rotation.keyVersion)]),
    );
    authority.rotate(START);
    const second = authority.rotate(START + 1_000).previous;

    const latest = keys.follow(authority.certificates, "control");
    expect(latest?.keyVersion).toBe(3);
    expect(keys.publicKey).toEqual(authority.keyPair.publicKey);
    expect(keys.keyVersion).toBe(3);
    expect(heard).toEqual([[3, 2, 3]]);
    // The replaced keys keep their grace, newest first.
    expect(keys.trustedKeys(START + 1_000)).toEqual([
      authority.keyPair.publicKey,
      second.publicKey,
      first.publicKey,
    ]);
    await keys.pinned();
    expect((await loadAuthorityPin(pinPath))?.authorityPublicKey).toEqual(authority.keyPair.publicKey);
    expect(await readdir(dir)).toEqual([AUTHORITY_PIN_FILE]);

    // The same list again changes nothing.
    expect(keys.follow(authority.certificates)).toBeNull();
    expect(heard).toHaveLength(1);
  });

  it("lets each replaced key's grace run out", async () => {
    const { authority, keys, first } = await world();
    authority.rotate(START);
    keys.follow(authority.certificates);
    expect(keys.trustedKeys(START + GRACE - 1)).toEqual([authority.keyPair.publicKey, first.publicKey]);
    expect(keys.trustedKeys(START + GRACE)).toEqual([authority.keyPair.publicKey]);
  });

  it("refuses a forged certificate, changing nothing: key, listeners and pin stay", async () => {
    const { authority, keys, pinPath, first } = await world();
    let told = 0;
    keys.onRotation(() => (told += 1));
    // Mallory signs "the key is now mine" with her own key and names the real key as the signer.
    const mallory = generateKeyPair();
    const signed = signAuthorityRotation(nodeCrypto, mallory, {
      experimentId: authority.experimentId,
      keyVersion: 2,
      publicKey: generateKeyPair().publicKey,
      rotatedAt: START,
    });
    const forged = swapPreviousKey(signed, first.publicKey);
    expect(keys.follow([forged])).toBeNull();
    // A valid chain that starts from a key this node never trusted leads nowhere either.
    expect(keys.follow([signed])).toBeNull();
    // A genuine certificate beside a forged one: the list is refused as a whole.
    authority.rotate(START);
    expect(keys.follow([...authority.certificates, forged])).toBeNull();
    expect(keys.publicKey).toEqual(first.publicKey);
    expect(told).toBe(0);
    await keys.pinned();
    expect((await loadAuthorityPin(pinPath))?.authorityPublicKey).toEqual(first.publicKey);
    // The genuine list alone is followed.
    expect(keys.follow(authority.certificates)?.keyVersion).toBe(2);
  });

  it("gives pass verifiers that follow its rotations, and starts from the rotations a join showed", async () => {
    const { authority, keys, clock, first } = await world();
    const verifier = keys.passVerifier();
    const identity = generateKeyPair();
    const oldPass = authority.pass(identity, { issuedAt: START - 1_000 });
    const { rotatedAt } = authority.rotate(START);
    const newPass = authority.pass(identity, { issuedAt: START + 1 });
    expect(() => verifier.verify(newPass, { now: START + 1 })).toThrow(
      expect.objectContaining({ code: "PASS_BAD_SIGNATURE" }),
    );
    keys.follow(authority.certificates);
    expect(verifier.verify(newPass, { now: START + 1 }).issuedAt).toBe(START + 1);
    expect(verifier.verify(oldPass, { now: rotatedAt + GRACE - 1 }).issuedAt).toBe(START - 1_000);
    expect(() => verifier.verify(oldPass, { now: rotatedAt + GRACE })).toThrow(
      expect.objectContaining({ code: "PASS_KEY_ROTATED" }),
    );

    // A newcomer that joined after the rotation trusts the old key for the rest of its grace.
    clock.now = START + 1_000;
    const newcomer = new AuthorityKeys({
      experimentId: authority.experimentId,
      publicKey: authority.keyPair.publicKey,
      rotations: authority.certificates.map((token) =>
        verifyAuthorityRotation(nodeCrypto, token, { experimentId: authority.experimentId }),
      ),
      graceMs: GRACE,
      now: () => clock.now,
    });
    expect(newcomer.trustedKeys()).toEqual([authority.keyPair.publicKey, first.publicKey]);
    expect(newcomer.passVerifier().verify(oldPass, { now: clock.now }).issuedAt).toBe(START - 1_000);
  });
});

/** The certificate with its previousPublicKey replaced, signature kept: a forgery in another key's name. */
function swapPreviousKey(token: string, previousPublicKey: Uint8Array): string {
  const [payload = "", signature = ""] = token.split(".");
  const fields = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>;
  fields["previousPublicKey"] = toBase64Url(previousPublicKey);
  return `${toBase64Url(canonicalJson(fields))}.${signature}`;
}
