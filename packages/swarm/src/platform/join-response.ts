import {
  AccessPassVerifier,
  decodePublicKey,
  equalBytes,
  isProtocolError,
  ProtocolErrorCode,
  verifyExperimentConfig,
  type AccessPass,
  type ExperimentConfig,
  type SignedConfig,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { z } from "zod";
import { JoinError, JoinErrorCode } from "./join-error.ts";

/**
 * The platform's join response (DESIGN §3) and everything a node checks before it believes it: the
 * pass and the config must both verify under the returned authority key, be for the returned
 * experiment, and the pass must be this node's and still valid. Nothing in the response is used
 * unverified except the experiment's display name and the initial peers (which the swarm
 * authenticates itself when it dials them).
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
  readonly config: ExperimentConfig;
  readonly configVersion: number;
  /** Multiaddrs of live aux peers, most recent first. */
  readonly initialPeers: readonly string[];
}

export interface VerifyJoinExpectations {
  /** This node's public key: the pass must be for it. */
  readonly publicKey: Uint8Array;
  readonly now: number;
  /** The authority key pinned on first use; a different key is refused (AUTHORITY_CHANGED). */
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
  if (expected.pinnedAuthority !== undefined && !equalBytes(expected.pinnedAuthority, authorityPublicKey)) {
    throw new JoinError(
      JoinErrorCode.AUTHORITY_CHANGED,
      `the experiment's authority key changed since this node first joined; ${TRUST_NEW_KEY}`,
    );
  }
  const pass = verifyPass(wire.pass, authorityPublicKey, experimentId, expected);
  const config = verifyConfig(wire.signedConfig, authorityPublicKey, experimentId);
  return {
    experiment: { id: experimentId, name: wire.experiment.name },
    passToken: pass.token,
    pass,
    passExpiresAt: pass.expiresAt,
    authorityPublicKey,
    config: config.config,
    configVersion: config.version,
    initialPeers: wire.initialPeers,
  };
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
      crypto: nodeCrypto,
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
    return verifyExperimentConfig(nodeCrypto, token, { authorityPublicKey, experimentId });
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
