import { privateKeyFromRaw, publicKeyFromRaw } from "@libp2p/crypto/keys";
import { isPeerId, type Ed25519PrivateKey, type PeerId } from "@libp2p/interface";
import { peerIdFromPublicKey, peerIdFromString } from "@libp2p/peer-id";
import nacl from "tweetnacl";
import { isUsablePublicKey, PUBLIC_KEY_BYTES, SECRET_KEY_BYTES, SEED_BYTES } from "./crypto-provider.ts";
import { equalBytes, fromBase64UrlExact, toBase64Url } from "./encoding.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";

/** An Ed25519 key pair in tweetnacl's layout: the secret key is seed (32 bytes) then public key (32). */
export interface KeyPair {
  readonly publicKey: Uint8Array;
  readonly secretKey: Uint8Array;
}

export function generateKeyPair(): KeyPair {
  return nacl.sign.keyPair();
}

export function keyPairFromSeed(seed: Uint8Array): KeyPair {
  if (seed.length !== SEED_BYTES) {
    throw new ProtocolError(
      ProtocolErrorCode.INVALID_KEY,
      `seed must be ${SEED_BYTES} bytes, got ${seed.length}`,
    );
  }
  return nacl.sign.keyPair.fromSeed(seed);
}

/** Rebuilds a key pair from a stored 64-byte secret key, checking that its halves belong together. */
export function keyPairFromSecretKey(secretKey: Uint8Array): KeyPair {
  if (secretKey.length !== SECRET_KEY_BYTES) {
    throw new ProtocolError(
      ProtocolErrorCode.INVALID_KEY,
      `secret key must be ${SECRET_KEY_BYTES} bytes, got ${secretKey.length}`,
    );
  }
  const derived = keyPairFromSeed(secretKey.subarray(0, SEED_BYTES));
  if (!equalBytes(derived.publicKey, secretKey.subarray(SEED_BYTES))) {
    throw new ProtocolError(
      ProtocolErrorCode.INVALID_KEY,
      "secret key's public half does not match its seed",
    );
  }
  return derived;
}

export function encodePublicKey(publicKey: Uint8Array): string {
  if (publicKey.length !== PUBLIC_KEY_BYTES) {
    throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, `public key must be ${PUBLIC_KEY_BYTES} bytes`);
  }
  return toBase64Url(publicKey);
}

/** Decodes a public key received from outside, refusing any that is not a usable Ed25519 key. */
export function decodePublicKey(text: string): Uint8Array {
  const publicKey = fromBase64UrlExact(text, PUBLIC_KEY_BYTES, "public key");
  if (!isUsablePublicKey(publicKey)) {
    throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, "public key is not a usable Ed25519 key");
  }
  return publicKey;
}

/** The libp2p PeerId of an Ed25519 public key: the identity a peer has in the swarm. */
export function peerIdFromEd25519PublicKey(publicKey: Uint8Array): PeerId {
  if (publicKey.length !== PUBLIC_KEY_BYTES) {
    throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, `public key must be ${PUBLIC_KEY_BYTES} bytes`);
  }
  return peerIdFromPublicKey(publicKeyFromRaw(publicKey));
}

/** The Ed25519 public key inside a PeerId (object or string form), as the pass carries it. */
export function ed25519PublicKeyFromPeerId(peerId: PeerId | string): Uint8Array {
  let id: PeerId;
  if (typeof peerId === "string") {
    try {
      id = peerIdFromString(peerId);
    } catch (error) {
      throw new ProtocolError(ProtocolErrorCode.MALFORMED, "not a valid PeerId", { cause: error });
    }
    // The base58 decoder tolerates some characters outside its alphabet; accept only canonical text.
    if (id.toString() !== peerId) throw new ProtocolError(ProtocolErrorCode.MALFORMED, "not a valid PeerId");
  } else if (isPeerId(peerId)) {
    id = peerId;
  } else {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, "not a PeerId");
  }
  if (id.type !== "Ed25519") {
    throw new ProtocolError(
      ProtocolErrorCode.PEER_ID_NOT_ED25519,
      `PeerId ${id.toString()} is ${id.type}, not Ed25519`,
    );
  }
  return id.publicKey.raw;
}

/** The libp2p private key for a key pair, so the pass key can be the node's identity. */
export function libp2pPrivateKey(keyPair: KeyPair): Ed25519PrivateKey {
  const key = privateKeyFromRaw(keyPairFromSecretKey(keyPair.secretKey).secretKey);
  if (key.type !== "Ed25519") {
    throw new ProtocolError(ProtocolErrorCode.INVALID_KEY, "expected an Ed25519 key");
  }
  return key;
}
