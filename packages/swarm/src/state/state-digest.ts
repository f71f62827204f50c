import { toHex } from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";

/**
 * A short fingerprint of the swarm's shared parameters (DESIGN §9, "one run = one model"): the first
 * 8 bytes of the SHA-256 of the parameter vector's bytes, as 16 lowercase hex digits. Every trainer
 * that applied the same steps to the same state holds the same bits (all members of a group apply
 * the same averaged update), so two trainers at one step with different digests train different
 * models: the swarm has split. 64 bits make an accidental collision between two models of one run
 * negligible; the digest proves nothing against a peer that lies about it.
 */
export const STATE_DIGEST_PATTERN = /^[0-9a-f]{16}$/;

export function stateDigest(parameters: Float32Array): string {
  const bytes = new Uint8Array(parameters.buffer, parameters.byteOffset, parameters.byteLength);
  return toHex(runtimeCrypto.sha256(bytes)).slice(0, 16);
}
