import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { experimentIdSchema, grantIdSchema, timestampSchema, usernameSchema } from "./fields.ts";
import type { KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

/**
 * Run control (DESIGN §9): the organizer's standing orders for a live run, signed by the
 * experiment's authority so that any node can pass them on and every node can check them.
 *
 * - `status`: `running`, or `paused` (trainers stop computing and wait).
 * - `generation`: how many times the organizer rolled the run back. A node whose state belongs to an
 *   older generation drops it and loads `rollback`'s checkpoint.
 * - `revoked`: usernames banned or removed from the allowlist, and grants (peer token ids) that
 *   were revoked. Every node refuses the passes of those users, and the passes issued on those
 *   grants, from then on, long before the passes expire. A grant stays listed only while passes
 *   issued on it may still be valid, so the list stays bounded as a run ages; a node key is never
 *   revoked as such (the same node joining again with a new token is accepted).
 * - `version` grows with every change, so a node keeps the newest control it has seen, whether it
 *   came from the platform or from another node.
 */

export const MAX_CONTROL_TOKEN_LENGTH = 512 * 1024;
/** Most usernames and most grants a run control may list. */
export const MAX_REVOKED_ENTRIES = 2_000;

export const RunStatus = { running: "running", paused: "paused" } as const;
export type RunStatus = (typeof RunStatus)[keyof typeof RunStatus];

const sha256HexSchema = z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex digits");
const countSchema = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const rollbackTargetSchema = z.strictObject({
  checkpointId: z.string().min(1).max(64),
  step: countSchema,
  sha256: sha256HexSchema,
  sizeBytes: countSchema,
});

const controlPayloadSchema = z.strictObject({
  v: z.literal(2),
  experimentId: experimentIdSchema,
  version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  issuedAt: timestampSchema,
  status: z.enum([RunStatus.running, RunStatus.paused]),
  generation: countSchema,
  rollback: rollbackTargetSchema.nullable(),
  revoked: z.strictObject({
    usernames: z.array(usernameSchema).max(MAX_REVOKED_ENTRIES),
    grants: z.array(grantIdSchema).max(MAX_REVOKED_ENTRIES),
  }),
});

/** The checkpoint a rolled-back run restarts from. */
export type RollbackTarget = z.infer<typeof rollbackTargetSchema>;

export interface RunControlInit {
  readonly experimentId: string;
  readonly version: number;
  readonly issuedAt: number;
  readonly status: RunStatus;
  readonly generation: number;
  /** Required when `generation` > 0: the checkpoint of the latest rollback. */
  readonly rollback: RollbackTarget | null;
  readonly revokedUsernames: readonly string[];
  /** Revoked peer tokens' ids: the passes issued on them are refused (AccessPass.grant). */
  readonly revokedGrants: readonly string[];
}

export interface RunControl extends RunControlInit {
  /** The compact token it was read from, to pass it on unchanged. */
  readonly token: string;
}

/** Signs a run control with the authority key. Returns the compact token. */
export function signRunControl(crypto: CryptoProvider, authority: KeyPair, init: RunControlInit): string {
  if (init.generation > 0 && init.rollback === null) {
    throw new RangeError("a rolled-back run control must name the checkpoint it rolls back to");
  }
  const payload: z.input<typeof controlPayloadSchema> = {
    v: 2,
    experimentId: init.experimentId,
    version: init.version,
    issuedAt: init.issuedAt,
    status: init.status,
    generation: init.generation,
    rollback: init.rollback,
    revoked: {
      usernames: [...new Set(init.revokedUsernames)].sort(),
      grants: [...new Set(init.revokedGrants)].sort(),
    },
  };
  controlPayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.control, payload, authority.secretKey);
}

/** Checks a run control's signature and experiment; throws ProtocolError otherwise. */
export function verifyRunControl(
  crypto: CryptoProvider,
  token: unknown,
  expected: { authorityPublicKey: Uint8Array; experimentId: string },
): RunControl {
  const opened = openToken(token, controlPayloadSchema, MAX_CONTROL_TOKEN_LENGTH, "run control");
  if (!verifyTokenSignature(crypto, SignatureDomain.control, opened, expected.authorityPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.CONTROL_BAD_SIGNATURE,
      "run control is not signed by the experiment's authority",
    );
  }
  const { payload } = opened;
  if (payload.experimentId !== expected.experimentId) {
    throw new ProtocolError(
      ProtocolErrorCode.CONTROL_WRONG_EXPERIMENT,
      `run control is for experiment ${payload.experimentId}, not ${expected.experimentId}`,
    );
  }
  if (payload.generation > 0 && payload.rollback === null) {
    throw new ProtocolError(ProtocolErrorCode.MALFORMED, "a rolled-back run control names no checkpoint");
  }
  return {
    experimentId: payload.experimentId,
    version: payload.version,
    issuedAt: payload.issuedAt,
    status: payload.status,
    generation: payload.generation,
    rollback: payload.rollback,
    revokedUsernames: payload.revoked.usernames,
    revokedGrants: payload.revoked.grants,
    token: token as string,
  };
}
