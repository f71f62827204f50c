import {
  AccessPassVerifier,
  decodePublicKey,
  equalBytes,
  followAuthorityRotations,
  isProtocolError,
  MAX_ROTATION_CERTIFICATES,
  MAX_ROTATION_TOKEN_LENGTH,
  ProtocolErrorCode,
  verifyAuthorityRotation,
  verifyExperimentConfig,
  type AccessPass,
  type AuthorityRotation,
  type ExperimentConfig,
  type SignedConfig,
} from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { z } from "zod";
import { JoinError, JoinErrorCode } from "./join-error.ts";

/**
 * The platform's join response (DESIGN §3) and everything a node checks before it believes it: the
 * pass and the config must both verify under the returned authority key, be for the returned
 * experiment, and the pass must be this node's and still valid. Nothing in the response is used
 * unverified except the experiment's display name and the initial peers (which the swarm
 * authenticates itself when it dials them).
 *
 * A node that trusts another key than the returned one (pinned on first use, or held since an
 * earlier join) takes the returned key only when the rotation certificates of the response chain
 * from its key to it, each signed by the key it replaces (protocol/authority-rotation.ts);
 * otherwise the join is refused with AUTHORITY_CHANGED, as when nothing was rotated.
 */

export const MAX_INITIAL_PEERS = 64;

/** The wire shape (unknown extra fields are ignored, so a newer platform stays compatible). */
export const joinResponseWireSchema = z.object({
  pass: z.string().min(1),
  passExpiresAt: z.string(),
  authorityPublicKey: z.string(),
  signedConfig: z.string().min(1),
  initialPeers: z.array(z.string().min(1).max(1024)).max(MAX_INITIAL_PEERS),
  experiment: z.object({ id: z.string().min(1).max(256), name: z.string().max(1024) }),
  /** Absent from platforms older than key rotation certificates. */
  authorityRotations: z
    .array(z.string().min(1).max(MAX_ROTATION_TOKEN_LENGTH))
    .max(MAX_ROTATION_CERTIFICATES)
    .default([]),
});
export type JoinResponseWire = z.infer<typeof joinResponseWireSchema>;

/** What a node knows after a verified join. */
export interface JoinedExperiment {
  readonly experiment: { readonly id: string; readonly name: string };
  /** The signed access pass, to present to peers and to the platform unchanged. */
  readonly passToken: string;
  readonly pass: AccessPass;
  /** When the pass expires, Unix milliseconds (from the signed pass). */
  readonly passExpiresAt: number;
  readonly authorityPublicKey: Uint8Array;
  /**
   * The rotations that led to `authorityPublicKey`, verified, oldest first (from the certificates
   * the platform listed; empty when the key was never rotated): the keys they replaced keep their
   * grace period (see AuthorityKeys).
   */
  readonly authorityRotations: readonly AuthorityRotation[];
  readonly config: ExperimentConfig;
  readonly configVersion: number;
  /** Multiaddrs of live aux peers, most recent first. */
  readonly initialPeers: readonly string[];
}

export interface VerifyJoinExpectations {
  /** This node's public key: the pass must be for it. */
  readonly publicKey: Uint8Array;
  readonly now: number;
  /**
   * The authority key this node trusts (pinned on first use, or followed since); another key is
   * refused (AUTHORITY_CHANGED) unless the response's rotation certificates chain from it to that key.
   */
  readonly pinnedAuthority?: Uint8Array | undefined;
  /** The experiment this node belongs to (pinned or from an earlier join); another is refused. */
  readonly experimentId?: string | undefined;
}

const TRUST_NEW_KEY =
  "if the organizer announced a new authority key, remove this node's authority pin (the file next " +
  "to its identity) and start again; otherwise someone may be impersonating the platform";

/** Parses and verifies a 200 answer of the join route. Throws JoinError. */
export function verifyJoinResponse(body: unknown, expected: VerifyJoinExpectations): JoinedExperiment {
  const parsed = joinResponseWireSchema.safeParse(body);
  if (!parsed.success) {
    const where = parsed.error.issues.map((issue) => issue.path.join(".") || "(body)").join(", ");
    throw new JoinError(
      JoinErrorCode.BAD_RESPONSE,
      `the server's join response is not what this peer expects (${where}); check --server, or update the peer`,
      { cause: parsed.error },
    );
  }
  const wire = parsed.data;
  const experimentId = wire.experiment.id;
  let authorityPublicKey: Uint8Array;
  try {
    authorityPublicKey = decodePublicKey(wire.authorityPublicKey);
  } catch (cause) {
    throw new JoinError(JoinErrorCode.BAD_RESPONSE, "the server sent an unusable authority key", { cause });
  }
  if (expected.experimentId !== undefined && expected.experimentId !== experimentId) {
    throw new JoinError(
      JoinErrorCode.AUTHORITY_CHANGED,
      `this node belongs to experiment ${expected.experimentId}, but the server answered for ` +
        `${experimentId}; use another identity file for another experiment, or ${TRUST_NEW_KEY}`,
    );
  }
  if (expected.pinnedAuthority !== undefined) {
    checkAuthorityFollows(expected.pinnedAuthority, {
      experimentId,
      authorityPublicKey,
      certificates: wire.authorityRotations,
    });
  }
  const authorityRotations = rotationsInto(authorityPublicKey, experimentId, wire.authorityRotations);
  const pass = verifyPass(wire.pass, authorityPublicKey, experimentId, expected);
  const config = verifyConfig(wire.signedConfig, authorityPublicKey, experimentId);
  return {
    experiment: { id: experimentId, name: wire.experiment.name },
    passToken: pass.token,
    pass,
    passExpiresAt: pass.expiresAt,
    authorityPublicKey,
    authorityRotations,
    config: config.config,
    configVersion: config.version,
    initialPeers: wire.initialPeers,
  };
}

/**
 * Checks that a node trusting `trusted` may take `returned.authorityPublicKey`: it is the same key,
 * or the certificates chain from `trusted` to it. Throws JoinError AUTHORITY_CHANGED otherwise.
 */
function checkAuthorityFollows(
  trusted: Uint8Array,
  returned: { experimentId: string; authorityPublicKey: Uint8Array; certificates: readonly string[] },
): void {
  if (equalBytes(trusted, returned.authorityPublicKey)) return;
  let reached: Uint8Array;
  try {
    reached = followAuthorityRotations(runtimeCrypto, {
      from: trusted,
      experimentId: returned.experimentId,
      certificates: returned.certificates,
    }).publicKey;
  } catch (cause) {
    const code = isProtocolError(cause) ? cause.code : "MALFORMED";
    throw new JoinError(
      JoinErrorCode.AUTHORITY_CHANGED,
      `the experiment's authority key changed, and the rotation certificates sent with it do not verify (${code}); ${TRUST_NEW_KEY}`,
      { cause },
    );
  }
  if (!equalBytes(reached, returned.authorityPublicKey)) {
    throw new JoinError(
      JoinErrorCode.AUTHORITY_CHANGED,
      `the experiment's authority key changed since this node first joined, and no rotation certificate signed by the key it trusts leads to the new one; ${TRUST_NEW_KEY}`,
    );
  }
}

/**
 * The verified rotations that led to `key`, oldest first: from the certificate naming it back
 * through the keys each replaced. A certificate that does not verify is a BAD_RESPONSE.
 */
function rotationsInto(
  key: Uint8Array,
  experimentId: string,
  certificates: readonly string[],
): AuthorityRotation[] {
  let rotations: AuthorityRotation[];
  try {
    rotations = certificates.map((token) => verifyAuthorityRotation(runtimeCrypto, token, { experimentId }));
  } catch (cause) {
    const code = isProtocolError(cause) ? cause.code : "MALFORMED";
    throw new JoinError(
      JoinErrorCode.BAD_RESPONSE,
      `an authority rotation certificate in the server's join response does not verify (${code}); do not trust this server`,
      { cause },
    );
  }
  const chain: AuthorityRotation[] = [];
  let current = key;
  for (;;) {
    const into = rotations.find(
      (rotation) =>
        equalBytes(rotation.publicKey, current) &&
        !chain.includes(rotation) &&
        (chain[0] === undefined || rotation.keyVersion < chain[0].keyVersion),
    );
    if (into === undefined) break;
    chain.unshift(into);
    current = into.previousPublicKey;
  }
  return chain;
}

function verifyPass(
  token: string,
  authorityPublicKey: Uint8Array,
  experimentId: string,
  expected: VerifyJoinExpectations,
): AccessPass {
  let pass: AccessPass;
  try {
    pass = new AccessPassVerifier({
      crypto: runtimeCrypto,
      authorityPublicKey,
      experimentId,
      cacheSize: 1,
    }).verify(token, { now: expected.now });
  } catch (cause) {
    throw new JoinError(JoinErrorCode.PASS_INVALID, passAdvice(cause), { cause });
  }
  if (!equalBytes(pass.peerPublicKey, expected.publicKey)) {
    throw new JoinError(
      JoinErrorCode.PASS_INVALID,
      "the server issued an access pass for another node's key; do not trust this server",
    );
  }
  return pass;
}

function passAdvice(cause: unknown): string {
  const code = isProtocolError(cause) ? cause.code : "MALFORMED";
  switch (code) {
    case ProtocolErrorCode.PASS_EXPIRED:
    case ProtocolErrorCode.PASS_NOT_YET_VALID:
      return (
        `the access pass the server just issued is not valid now (${code}); ` +
        "check that this computer's clock is right"
      );
    case ProtocolErrorCode.PASS_WRONG_EXPERIMENT:
      return "the access pass is for another experiment than the server named; do not trust this server";
    default:
      return `the access pass is not signed by the experiment's authority (${code}); do not trust this server`;
  }
}

function verifyConfig(token: string, authorityPublicKey: Uint8Array, experimentId: string): SignedConfig {
  try {
    return verifyExperimentConfig(runtimeCrypto, token, { authorityPublicKey, experimentId });
  } catch (cause) {
    if (isProtocolError(cause, ProtocolErrorCode.CONFIG_INVALID)) {
      throw new JoinError(
        JoinErrorCode.BAD_RESPONSE,
        `the experiment config is signed but this peer does not understand it (${cause.message}); update the peer`,
        { cause },
      );
    }
    const code = isProtocolError(cause) ? cause.code : "MALFORMED";
    throw new JoinError(
      JoinErrorCode.CONFIG_TAMPERED,
      `the experiment config does not verify under the experiment's authority key (${code}); ` +
        "refusing to train on it: do not trust this server or the network path to it",
      { cause },
    );
  }
}
