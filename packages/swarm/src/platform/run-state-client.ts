import {
  checkAttestedBytes,
  isProtocolError,
  MAX_CONTROL_TOKEN_LENGTH,
  MAX_ROTATION_CERTIFICATES,
  MAX_ROTATION_TOKEN_LENGTH,
  ProtocolErrorCode,
  toHex,
  verifyCheckpointAttestation,
  type CheckpointAttestation,
  type RollbackTarget,
} from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { z } from "zod";
import { deserializeTrainingState } from "../state/state-snapshot.ts";
import type { TrainingState } from "../state/training-state.ts";
import { isPlatformRequestError, PlatformClientErrorCode, PlatformRequestError } from "./platform-client.ts";
import type { PlatformClient } from "./platform-client.ts";

/**
 * What every node asks the platform about the run itself (DESIGN §9): the organizer's current run
 * control, and the checkpoint a run resumes from. A checkpoint is trusted only through the
 * platform's attestation (signed by the experiment's authority) or a signed run control naming it,
 * and its bytes are checked against either before they are parsed. Both are checked with the keys
 * `client.authority` trusts at the time, and the run control answer carries the certificates of any
 * rotation of the authority key, which the client's authority follows before the control is verified.
 */

/** Largest checkpoint a node downloads (the state blob of a model of ~500 M parameters with Adam). */
export const MAX_CHECKPOINT_DOWNLOAD_BYTES = 6 * 1024 ** 3;

const controlAnswerSchema = z.object({
  control: z.string().min(1).max(MAX_CONTROL_TOKEN_LENGTH),
  /** Absent from platforms older than key rotation certificates. */
  authorityRotations: z
    .array(z.string().min(1).max(MAX_ROTATION_TOKEN_LENGTH))
    .max(MAX_ROTATION_CERTIFICATES)
    .default([]),
});
const latestAnswerSchema = z.object({
  checkpoint: z.object({
    id: z.string().min(1).max(256),
    downloadUrl: z.string().min(1).max(2048),
    /** The aux's held-out evaluation; null until one is recorded (absent from older platforms). */
    evaluation: z.unknown().optional(),
  }),
  attestation: z.string().min(1).max(4096),
});

const latestStepSchema = z.object({ checkpoint: z.object({ step: z.number().int().min(0) }) });

/**
 * The step of the run's latest checkpoint as the platform lists it, or null when it has none: a
 * progress question (has the aux checkpointed the last step yet?), so nothing is downloaded or
 * verified. Throws PlatformRequestError when the platform cannot be asked.
 */
export async function latestCheckpointStep(
  client: PlatformClient,
  signal?: AbortSignal,
): Promise<number | null> {
  try {
    return (await client.get("checkpoints/latest", latestStepSchema, signal)).checkpoint.step;
  } catch (error) {
    if (isPlatformRequestError(error, "NOT_FOUND")) return null;
    throw error;
  }
}

/**
 * The run control token as the platform signs it now; the caller verifies it (the run control
 * board). The rotation certificates that come with it are followed first (`client.authority`), so a
 * control signed by a rotated key verifies, and the node's passes, pin and requests move to that key.
 */
export async function fetchRunControl(client: PlatformClient, signal?: AbortSignal): Promise<string> {
  const answer = await client.signed("GET", "control", { schema: controlAnswerSchema, signal });
  client.authority.follow(answer.authorityRotations, "control");
  return answer.control;
}

/** A checkpoint's state, and the attestation that vouches for it. */
export interface AttestedState {
  readonly attestation: CheckpointAttestation;
  readonly state: TrainingState;
  /** Whether the platform has the checkpoint's held-out evaluation (an aux scores those it lacks). */
  readonly evaluated: boolean;
}

/**
 * The run's latest checkpoint, verified, or null when the platform has none yet. Throws
 * PlatformRequestError when the platform cannot be asked, ProtocolError when the attestation or the
 * bytes do not check out. The attestation is signed when it is read, by the authority's current key:
 * one signed by a key this node has not followed yet sends it to the run control for the rotation
 * certificates, and is checked once more.
 */
export async function loadLatestCheckpoint(
  client: PlatformClient,
  signal?: AbortSignal,
): Promise<AttestedState | null> {
  let latest: z.output<typeof latestAnswerSchema>;
  try {
    latest = await client.get("checkpoints/latest", latestAnswerSchema, signal);
  } catch (error) {
    if (isPlatformRequestError(error, "NOT_FOUND")) return null;
    throw error;
  }
  let attestation: CheckpointAttestation;
  try {
    attestation = verifyAttestation(client, latest.attestation);
  } catch (error) {
    if (!isProtocolError(error, ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE)) throw error;
    await fetchRunControl(client, signal);
    attestation = verifyAttestation(client, latest.attestation);
  }
  if (attestation.checkpointId !== latest.checkpoint.id) {
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the attestation is for checkpoint ${attestation.checkpointId}, the answer names ${latest.checkpoint.id}`,
    );
  }
  const bytes = await client.download(latest.checkpoint.downloadUrl, attestation.sizeBytes, signal);
  const state = attestedState(bytes, attestation, attestation.generation);
  const evaluation = latest.checkpoint.evaluation;
  return { attestation, state, evaluated: evaluation !== null && evaluation !== undefined };
}

/** The attestation, checked with the authority's current key, else with a replaced one in its grace. */
function verifyAttestation(client: PlatformClient, token: string): CheckpointAttestation {
  const [current, ...replaced] = client.authority.trustedKeys();
  const expected = (authorityPublicKey: Uint8Array) => ({
    authorityPublicKey,
    experimentId: client.experimentId,
  });
  try {
    return verifyCheckpointAttestation(runtimeCrypto, token, expected(current));
  } catch (error) {
    if (!isProtocolError(error, ProtocolErrorCode.CHECKPOINT_BAD_SIGNATURE)) throw error;
    for (const key of replaced) {
      try {
        return verifyCheckpointAttestation(runtimeCrypto, token, expected(key));
      } catch {
        // the current key's refusal is the one reported
      }
    }
    throw error;
  }
}

/**
 * The checkpoint a signed run control rolls the run back to, checked against the control's
 * SHA-256 and size; the state is marked with the control's generation.
 */
export async function loadRollbackCheckpoint(
  client: PlatformClient,
  target: RollbackTarget,
  generation: number,
  signal?: AbortSignal,
): Promise<TrainingState> {
  const path = `checkpoints/${encodeURIComponent(target.checkpointId)}`;
  const bytes = await client.download(path, target.sizeBytes, signal);
  return attestedState(bytes, target, generation);
}

function attestedState(
  bytes: Uint8Array,
  vouched: Pick<CheckpointAttestation, "sha256" | "sizeBytes" | "step">,
  generation: number,
): TrainingState {
  const sha256Hex = toHex(runtimeCrypto.sha256(bytes));
  checkAttestedBytes(vouched, { sha256Hex, sizeBytes: bytes.byteLength });
  const state = deserializeTrainingState(bytes);
  if (state.epoch !== vouched.step) {
    throw new PlatformRequestError(
      PlatformClientErrorCode.BAD_RESPONSE,
      `the checkpoint of step ${vouched.step} holds the state of step ${state.epoch}`,
    );
  }
  return { ...state, generation };
}
