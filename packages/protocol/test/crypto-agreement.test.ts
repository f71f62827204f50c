/**
 * The two crypto providers must be interchangeable: a browser peer (tweetnacl) and a Node peer
 * (node:crypto) sign the same bytes and accept or refuse exactly the same signatures.
 *
 * tweetnacl verifies about 170 signatures a second, so properties that run it stay near 100 runs.
 */
import { createPrivateKey, createPublicKey } from "node:crypto";
import { generateKeyPair as generateLibp2pKeyPair } from "@libp2p/crypto/keys";
import { peerIdFromPrivateKey, peerIdFromString } from "@libp2p/peer-id";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ed25519PublicKeyFromPeerId,
  keyPairFromSecretKey,
  keyPairFromSeed,
  libp2pPrivateKey,
  nodeCrypto,
  peerIdFromEd25519PublicKey,
  portableCrypto,
  ProtocolErrorCode,
  type KeyPair,
} from "../src/node.ts";
import { expectProtocolError } from "./expect-protocol-error.ts";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const SEED = 0x5eed;
/** For properties that run tweetnacl's signing or verification. */
const NACL_RUNS = { seed: SEED, numRuns: 100 };
/** For properties that only run node:crypto or cheap code. */
const FAST_RUNS = { seed: SEED, numRuns: 300 };

const seedArb = fc.uint8Array({ minLength: 32, maxLength: 32 });
const messageArb = fc.uint8Array({ maxLength: 4096 });

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

/** Returns a copy of `bytes` with one bit flipped; `bit` is taken modulo the bit length. */
function flipBit(bytes: Uint8Array, bit: number): Uint8Array {
  const out = bytes.slice();
  const index = bit % (bytes.length * 8);
  out[index >> 3] = (out[index >> 3] ?? 0) ^ (1 << (index & 7));
  return out;
}

const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/**
 * A key pair derived by node:crypto alone, independently of tweetnacl. Used where a property is
 * about verification, so tweetnacl's slow key derivation does not eat the run budget.
 */
function nodeKeyPairFromSeed(seed: Uint8Array): KeyPair {
  const privateKey = createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]),
    format: "der",
    type: "pkcs8",
  });
  const spki = createPublicKey(privateKey).export({ format: "der", type: "spki" });
  const publicKey = new Uint8Array(spki.subarray(spki.length - 32));
  const secretKey = new Uint8Array(64);
  secretKey.set(seed, 0);
  secretKey.set(publicKey, 32);
  return { publicKey, secretKey };
}

/** Runs `verify` on both providers, asserting that neither throws and that they agree. */
function verifyBoth(message: Uint8Array, signature: Uint8Array, publicKey: Uint8Array): boolean {
  const portable = portableCrypto.verify(message, signature, publicKey);
  const node = nodeCrypto.verify(message, signature, publicKey);
  expect(portable, "tweetnacl and node:crypto disagree").toBe(node);
  return portable;
}

/** Ed25519 group order L, and a signature's S (its last 32 bytes) as a little-endian integer. */
const ED25519_L = (1n << 252n) + 27742317777372353535851937790883648493n;

function withScalar(signature: Uint8Array, scalar: bigint): Uint8Array {
  const out = signature.slice();
  let rest = scalar;
  for (let i = 32; i < 64; i++) {
    out[i] = Number(rest & 0xffn);
    rest >>= 8n;
  }
  return out;
}

function scalarOf(signature: Uint8Array): bigint {
  let value = 0n;
  for (let i = 63; i >= 32; i--) value = (value << 8n) | BigInt(signature[i] ?? 0);
  return value;
}

// ---------------------------------------------------------------------------------------------
// Signatures
// ---------------------------------------------------------------------------------------------

describe("Ed25519: tweetnacl and node:crypto agree", () => {
  it("derive the same public key from a seed", () => {
    fc.assert(
      fc.property(seedArb, (seed) => {
        expect(hex(keyPairFromSeed(seed).publicKey)).toBe(hex(nodeKeyPairFromSeed(seed).publicKey));
      }),
      NACL_RUNS,
    );
  });

  it("produce byte-identical signatures, and each verifies the other's", () => {
    fc.assert(
      fc.property(seedArb, messageArb, (seed, message) => {
        const keyPair = nodeKeyPairFromSeed(seed);
        const portableSignature = portableCrypto.sign(message, keyPair.secretKey);
        const nodeSignature = nodeCrypto.sign(message, keyPair.secretKey);
        expect(portableSignature).toHaveLength(64);
        expect(hex(nodeSignature)).toBe(hex(portableSignature));
        expect(portableCrypto.verify(message, nodeSignature, keyPair.publicKey)).toBe(true);
        expect(nodeCrypto.verify(message, portableSignature, keyPair.publicKey)).toBe(true);
      }),
      NACL_RUNS,
    );
  });

  it("both reject a signature after one bit of the message is flipped", () => {
    fc.assert(
      fc.property(
        seedArb,
        fc.uint8Array({ minLength: 1, maxLength: 4096 }),
        fc.nat(),
        (seed, message, bit) => {
          const keyPair = nodeKeyPairFromSeed(seed);
          const signature = nodeCrypto.sign(message, keyPair.secretKey);
          expect(verifyBoth(flipBit(message, bit), signature, keyPair.publicKey)).toBe(false);
        },
      ),
      NACL_RUNS,
    );
  });

  it("both reject a signature with one bit flipped", () => {
    fc.assert(
      fc.property(seedArb, messageArb, fc.nat(), (seed, message, bit) => {
        const keyPair = nodeKeyPairFromSeed(seed);
        const signature = nodeCrypto.sign(message, keyPair.secretKey);
        expect(verifyBoth(message, flipBit(signature, bit), keyPair.publicKey)).toBe(false);
      }),
      NACL_RUNS,
    );
  });

  it("give the same answer, without throwing, when one bit of the public key is flipped", () => {
    // A flipped key is often not a curve point at all; both must then say false, not throw.
    let rejected = 0;
    let runs = 0;
    fc.assert(
      fc.property(seedArb, messageArb, fc.nat(), (seed, message, bit) => {
        const keyPair = nodeKeyPairFromSeed(seed);
        const signature = nodeCrypto.sign(message, keyPair.secretKey);
        runs++;
        if (!verifyBoth(message, signature, flipBit(keyPair.publicKey, bit))) rejected++;
      }),
      NACL_RUNS,
    );
    expect(runs).toBeGreaterThan(0);
    expect(rejected / runs).toBeGreaterThanOrEqual(0.99);
  });

  it("give the same answer, without throwing, for arbitrary 32-byte public keys", () => {
    fc.assert(
      fc.property(
        seedArb,
        messageArb,
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        (seed, message, publicKey) => {
          const signature = nodeCrypto.sign(message, nodeKeyPairFromSeed(seed).secretKey);
          expect(verifyBoth(message, signature, publicKey)).toBe(false);
        },
      ),
      NACL_RUNS,
    );
  });

  it("both reject signatures and public keys of the wrong length with false, never a throw", () => {
    const keyPair = nodeKeyPairFromSeed(new Uint8Array(32).fill(9));
    const message = utf8("length check");
    const signature = nodeCrypto.sign(message, keyPair.secretKey);
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 160 }).filter((bytes) => bytes.length !== 64),
        fc.uint8Array({ maxLength: 96 }).filter((bytes) => bytes.length !== 32),
        (badSignature, badKey) => {
          expect(verifyBoth(message, badSignature, keyPair.publicKey)).toBe(false);
          expect(verifyBoth(message, signature, badKey)).toBe(false);
          expect(verifyBoth(message, badSignature, badKey)).toBe(false);
        },
      ),
      FAST_RUNS,
    );
    // A real signature cut short or extended by one byte, against the right key.
    expect(verifyBoth(message, signature.subarray(0, 63), keyPair.publicKey)).toBe(false);
    expect(verifyBoth(message, Uint8Array.of(...signature, 0), keyPair.publicKey)).toBe(false);
    expect(verifyBoth(message, signature, keyPair.publicKey.subarray(0, 31))).toBe(false);
    expect(verifyBoth(message, signature, Uint8Array.of(...keyPair.publicKey, 0))).toBe(false);
    // ...and the untouched signature still verifies, so the false answers above are meaningful.
    expect(verifyBoth(message, signature, keyPair.publicKey)).toBe(true);
  });

  it("both reject a signature whose scalar S is not reduced (S + L): no signature malleability", () => {
    fc.assert(
      fc.property(seedArb, messageArb, (seed, message) => {
        const keyPair = nodeKeyPairFromSeed(seed);
        const signature = nodeCrypto.sign(message, keyPair.secretKey);
        const malleated = withScalar(signature, scalarOf(signature) + ED25519_L);
        expect(hex(malleated)).not.toBe(hex(signature));
        expect(verifyBoth(message, malleated, keyPair.publicKey)).toBe(false);
      }),
      { seed: SEED, numRuns: 20 },
    );
  });

  it("both reject the trivial signature (R = identity, S = 0) under the small-order identity key", () => {
    const identityPoint = new Uint8Array(32);
    identityPoint[0] = 1;
    const trivialSignature = new Uint8Array(64);
    trivialSignature[0] = 1;
    expect(verifyBoth(utf8("any message at all"), trivialSignature, identityPoint)).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// SHA-256
// ---------------------------------------------------------------------------------------------

describe("SHA-256: @noble/hashes and node:crypto agree", () => {
  it("on random data", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 10_000 }), (data) => {
        const portable = portableCrypto.sha256(data);
        expect(portable).toHaveLength(32);
        expect(hex(nodeCrypto.sha256(data))).toBe(hex(portable));
      }),
      FAST_RUNS,
    );
  });

  it.each([
    ["abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
    ["", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    [
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    ],
  ])("matches the FIPS 180-2 test vector for %j", (input, expected) => {
    expect(hex(portableCrypto.sha256(utf8(input)))).toBe(expected);
    expect(hex(nodeCrypto.sha256(utf8(input)))).toBe(expected);
  });
});

// ---------------------------------------------------------------------------------------------
// Keys and PeerIds
// ---------------------------------------------------------------------------------------------

describe("key pairs", () => {
  it("keyPairFromSeed is deterministic, and the secret key is seed || public key", () => {
    fc.assert(
      fc.property(seedArb, (seed) => {
        const first = keyPairFromSeed(seed);
        const second = keyPairFromSeed(seed.slice());
        expect(hex(second.publicKey)).toBe(hex(first.publicKey));
        expect(hex(second.secretKey)).toBe(hex(first.secretKey));
        expect(hex(first.secretKey)).toBe(hex(seed) + hex(first.publicKey));
      }),
      { seed: SEED, numRuns: 50 },
    );
  });

  it("keyPairFromSeed refuses seeds that are not 32 bytes", () => {
    for (const length of [0, 1, 31, 33, 64]) {
      expectProtocolError(() => keyPairFromSeed(new Uint8Array(length)), [ProtocolErrorCode.INVALID_KEY]);
    }
  });

  it("keyPairFromSecretKey rebuilds a pair and refuses a public half that does not match", () => {
    fc.assert(
      fc.property(seedArb, fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.nat(), (seed, other, bit) => {
        const keyPair = nodeKeyPairFromSeed(seed);
        expect(hex(keyPairFromSecretKey(keyPair.secretKey).publicKey)).toBe(hex(keyPair.publicKey));

        const flipped = Uint8Array.of(...seed, ...flipBit(keyPair.publicKey, bit));
        expectProtocolError(() => keyPairFromSecretKey(flipped), [ProtocolErrorCode.INVALID_KEY]);

        fc.pre(hex(other) !== hex(keyPair.publicKey));
        expectProtocolError(
          () => keyPairFromSecretKey(Uint8Array.of(...seed, ...other)),
          [ProtocolErrorCode.INVALID_KEY],
        );
      }),
      { seed: SEED, numRuns: 40 },
    );
  });

  it("keyPairFromSecretKey refuses keys that are not 64 bytes", () => {
    const secretKey = nodeKeyPairFromSeed(new Uint8Array(32).fill(3)).secretKey;
    for (const bad of [
      new Uint8Array(0),
      secretKey.subarray(0, 32),
      secretKey.subarray(0, 63),
      Uint8Array.of(...secretKey, 0),
    ]) {
      expectProtocolError(() => keyPairFromSecretKey(bad), [ProtocolErrorCode.INVALID_KEY]);
    }
  });
});

describe("PeerIds", () => {
  it("round-trip a public key through the PeerId and its string form, both ways", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (publicKey) => {
        const peerId = peerIdFromEd25519PublicKey(publicKey);
        const text = peerId.toString();
        expect(text.startsWith("12D3KooW")).toBe(true);

        // key -> PeerId -> string -> key
        expect(hex(ed25519PublicKeyFromPeerId(text))).toBe(hex(publicKey));
        expect(hex(ed25519PublicKeyFromPeerId(peerId))).toBe(hex(publicKey));
        // string -> key -> PeerId -> string
        const parsed = peerIdFromString(text);
        expect(peerIdFromEd25519PublicKey(ed25519PublicKeyFromPeerId(parsed)).toString()).toBe(text);
        expect(parsed.equals(peerId)).toBe(true);
      }),
      FAST_RUNS,
    );
  });

  it("peerIdFromEd25519PublicKey refuses keys that are not 32 bytes", () => {
    for (const length of [0, 31, 33, 64]) {
      expectProtocolError(
        () => peerIdFromEd25519PublicKey(new Uint8Array(length)),
        [ProtocolErrorCode.INVALID_KEY],
      );
    }
  });

  it("libp2pPrivateKey is the same key: same public key, same PeerId, signatures that verify", async () => {
    await fc.assert(
      fc.asyncProperty(seedArb, messageArb, async (seed, message) => {
        const keyPair = keyPairFromSeed(seed);
        const key = libp2pPrivateKey(keyPair);
        expect(key.type).toBe("Ed25519");
        expect(hex(key.publicKey.raw)).toBe(hex(keyPair.publicKey));
        expect(peerIdFromPrivateKey(key).toString()).toBe(
          peerIdFromEd25519PublicKey(keyPair.publicKey).toString(),
        );

        const signature = await key.sign(message);
        expect(hex(signature)).toBe(hex(nodeCrypto.sign(message, keyPair.secretKey)));
        expect(portableCrypto.verify(message, signature, keyPair.publicKey)).toBe(true);
      }),
      { seed: SEED, numRuns: 30 },
    );
  });

  it("libp2pPrivateKey refuses a secret key whose halves do not belong together", () => {
    const keyPair = nodeKeyPairFromSeed(new Uint8Array(32).fill(4));
    const mismatched = { publicKey: keyPair.publicKey, secretKey: flipBit(keyPair.secretKey, 300) };
    expectProtocolError(() => libp2pPrivateKey(mismatched), [ProtocolErrorCode.INVALID_KEY]);
  });

  it("a secp256k1 PeerId gives PEER_ID_NOT_ED25519, as string and as object", async () => {
    const peerId = peerIdFromPrivateKey(await generateLibp2pKeyPair("secp256k1"));
    expect(peerId.type).toBe("secp256k1");
    expectProtocolError(
      () => ed25519PublicKeyFromPeerId(peerId.toString()),
      [ProtocolErrorCode.PEER_ID_NOT_ED25519],
    );
    expectProtocolError(() => ed25519PublicKeyFromPeerId(peerId), [ProtocolErrorCode.PEER_ID_NOT_ED25519]);
  });

  it("an RSA PeerId (a hash, no key inside) gives PEER_ID_NOT_ED25519", () => {
    expectProtocolError(
      () => ed25519PublicKeyFromPeerId("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"),
      [ProtocolErrorCode.PEER_ID_NOT_ED25519],
    );
  });

  it.each([
    "",
    "garbage",
    "12D3KooW",
    "Qm",
    "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5",
    "12D3KooWT3gYEvLJyx1FyyHqrmvdy1tMjpgxmu9aSeKMEuafQtyC ",
    "12D3KooWT3gYEvLJyx1FyyHqrmvdy1tMjpgxmu9aSeKMEuafQtyCC",
    "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
    "/ip4/127.0.0.1/tcp/4001",
    "\u0000",
    "\u{1F600}",
  ])("garbage PeerId %j gives MALFORMED", (text) => {
    expectProtocolError(() => ed25519PublicKeyFromPeerId(text), [ProtocolErrorCode.MALFORMED]);
  });
});
