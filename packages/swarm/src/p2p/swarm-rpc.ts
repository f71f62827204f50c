import {
  type AccessPassVerifier,
  MemoryNonceStore,
  ProtocolErrorCode,
  ReplayGuard,
  RequestVerifier,
} from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import { Libp2pRpc } from "../rpc/libp2p-rpc.ts";
import type { PassHolder } from "./pass-holder.ts";
import type { PeerAuthorizer } from "./peer-authorizer.ts";
import type { RefusalLog } from "./refusal-log.ts";
import type { SwarmLibp2p } from "./swarm-libp2p.ts";
import type { SwarmNodeOptions } from "./swarm-node-options.ts";

/**
 * A peer whose pass was refused (revoked, expired, signed by a key this node does not trust yet) is
 * gated this briefly: that pass is refused at every hello anyway, and the same machine may come
 * back at once with a good one (a new token's, a refreshed one, one of a rotated key).
 */
export const REFUSED_DENY_MS = 5_000;
/**
 * A pass signed by a key this node does not trust is gated this long, or until the node follows a
 * rotation of the authority key (then at once, see PeerAuthorizer.forgiveKeyDenials).
 */
export const UNTRUSTED_KEY_DENY_MS = 60_000;
/** Refusals of a pass the authority did sign, for the key it names (see onRefusedPeer). */
const OWN_PASS_REFUSALS: ReadonlySet<string> = new Set([
  ProtocolErrorCode.PASS_REVOKED,
  ProtocolErrorCode.PASS_EXPIRED,
  ProtocolErrorCode.PASS_NOT_YET_VALID,
  ProtocolErrorCode.PASS_WRONG_ROLE,
  ProtocolErrorCode.PASS_KEY_ROTATED,
]);
/** A node whose pass peers call outdated (PASS_KEY_ROTATED) fetches a new one at most this often. */
const STALE_PASS_REFRESH_MS = 30_000;

/** What the signed RPC layer of a node is made of. */
export interface SwarmRpcParts {
  readonly libp2p: SwarmLibp2p;
  readonly options: SwarmNodeOptions;
  /** The node's pass verifier (the organizer's revocation list applied). */
  readonly passes: AccessPassVerifier;
  readonly passHolder: PassHolder;
  readonly authorizer: PeerAuthorizer;
  /** Where refusals are remembered: passes this node refused, and peers that refused this node's. */
  readonly refusals: { readonly refusedPeers: RefusalLog; readonly refusedBy: RefusalLog };
  readonly now: () => number;
  /** Allowed |time − now| of signed requests. */
  readonly maxSkewMs: number;
}

/**
 * The node's signed RPC layer, with what a verified or refused peer means for the gate: a verified
 * peer is admitted; a pass of a key this node does not trust is gated until it follows a rotation;
 * a genuine pass of the peer's own that no longer holds is remembered (an aux reports it) and gated
 * briefly; anything else is an attempt, gated for the usual while. A peer that calls this node's
 * pass outdated makes it fetch a new one (at most every STALE_PASS_REFRESH_MS).
 */
export function createSwarmRpc(parts: SwarmRpcParts): Libp2pRpc {
  const { libp2p, options, passes, passHolder, authorizer, refusals, now, maxSkewMs } = parts;
  const staleRefresh = { at: -Infinity };
  return new Libp2pRpc({
    node: libp2p,
    experimentId: options.experimentId,
    identity: options.identity,
    crypto: runtimeCrypto,
    passes,
    requests: new RequestVerifier({
      crypto: runtimeCrypto,
      passes,
      recipientPublicKey: options.identity.publicKey,
      replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs }),
    }),
    currentPass: () => passHolder.token(),
    ...(options.caps === undefined ? {} : { caps: options.caps }),
    onVerifiedPeer: (peer, pass) => {
      authorizer.admit(peer, pass);
      refusals.refusedPeers.forget(peer);
      refusals.refusedBy.forget(peer);
    },
    onRefusedPeer: (peer, code, reason, ownPass) => {
      // A pass signed by a key this node does not trust: a forgery, or a key the authority rotated
      // to that this node has not heard of yet (it asks every 5 s); gated, and let in at once when
      // it follows that rotation. Nothing to report: it says nothing of a node's standing.
      if (code === ProtocolErrorCode.PASS_BAD_SIGNATURE) {
        authorizer.denyForKey(peer, reason, UNTRUSTED_KEY_DENY_MS);
        return;
      }
      // A genuine pass of the peer's own that no longer holds (revoked, expired, of a replaced
      // key …): remembered with why (an aux reports it), and gated briefly, since the same
      // machine may come back at once with a good one. Anything else (another's pass, a request
      // not signed by the pass's key) is an attempt, gated for the usual while.
      if (!ownPass || !OWN_PASS_REFUSALS.has(code)) {
        authorizer.deny(peer, reason);
        return;
      }
      refusals.refusedPeers.record(peer, code, reason);
      authorizer.deny(peer, reason, REFUSED_DENY_MS);
    },
    onRefusedBy: (peer, code, reason) => {
      refusals.refusedBy.record(peer, code, reason);
      // The peer knows our pass's key was replaced: a refresh (a join) brings the rotation and a new pass.
      if (code === ProtocolErrorCode.PASS_KEY_ROTATED && now() - staleRefresh.at >= STALE_PASS_REFRESH_MS) {
        staleRefresh.at = now();
        passHolder.refreshNow().catch((error: unknown) => {
          options.logger.warn({ err: error }, "could not fetch a pass of the experiment's new authority key");
        });
      }
    },
    logger: options.logger,
    now,
  });
}
