import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { experimentIdSchema, timestampSchema } from "./fields.ts";
import type { KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

/**
 * The platform's word for a checkpoint it accepted (DESIGN §9): which experiment, which step of
 * which rollback generation and timeline, the file's SHA-256 and size, and the config version it
 * was trained with, signed by the experiment's authority. A node that resumes a run from a
 * checkpoint (served by an aux peer or downloaded from the platform) checks the attestation, then
 * the bytes against it, before it trains on them.
 */

export const MAX_ATTESTATION_TOKEN_LENGTH = 2048;

const countSchema = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const attestationPayloadSchema = z.strictObject({
  v: z.literal(1),
  experimentId: experimentIdSchema,
  checkpointId: z.string().min(1).max(64),
  step: countSchema,
  sha256: z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex digits"),
  sizeBytes: countSchema,
  generation: countSchema,
  timeline: countSchema,
  configVersion: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  createdAt: timestampSchema,
});

export type CheckpointAttestationInit = Omit<z.infer<typeof attestationPayloadSchema>, "v">;

export interface CheckpointAttestation extends CheckpointAttestationInit {
  readonly token: string;
}

export function signCheckpointAttestation(
  crypto: CryptoProvider,
  authority: KeyPair,
  init: CheckpointAttestationInit,
): string {
  const payload = attestationPayloadSchema.parse({ v: 1, ...init });
  return sealToken(crypto, SignatureDomain.checkpoint, payload, authority.secretKey);
}

/** Checks the signature and experiment of an attestation; throws ProtocolError otherwise. */
export function verifyCheckpointAttestation(
  crypto: CryptoProvider,
  token: unknown,
  expected: { authorityPublicKey: Uint8Array; experimentId: string },
): CheckpointAttestation {
  const opened = openToken(
    token,
    attestationPayloadSchema,
    MAX_ATTESTATION_TOKEN_LENGTH,
    "checkpoint attestation",
  );
  if (!verifyTokenSignature(crypto, SignatureDomain.checkpoint, opened, expected.authorityPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE,
      "checkpoint attestation is not signed by the experiment's authority",
    );
  }
  const { v: _v, ...fields } = opened.payload;
  if (fields.experimentId !== expected.experimentId) {
    throw new ProtocolError(
      ProtocolErrorCode.CHECKPOINT_WRONG_EXPERIMENT,
      `checkpoint attestation is for experiment ${fields.experimentId}, not ${expected.experimentId}`,
    );
  }
  return { ...fields, token: token as string };
}

/** Checks that `bytes` (hashed by the caller) are the attested file; throws CHECKPOINT_MISMATCH. */
export function checkAttestedBytes(
  attestation: Pick<CheckpointAttestation, "sha256" | "sizeBytes" | "step">,
  actual: { sha256Hex: string; sizeBytes: number },
): void {
  if (actual.sizeBytes !== attestation.sizeBytes || actual.sha256Hex !== attestation.sha256) {
    throw new ProtocolError(
      ProtocolErrorCode.CHECKPOINT_MISMATCH,
      `the checkpoint of step ${attestation.step} is ${actual.sizeBytes} bytes hashing to ${actual.sha256Hex.slice(0, 12)}…; its attestation says ${attestation.sizeBytes} bytes hashing to ${attestation.sha256.slice(0, 12)}…`,
    );
  }
}
