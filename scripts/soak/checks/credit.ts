import type { Leaderboard } from "../../../apps/web/src/api/schemas/public.ts";
import type { CheckResult, PeerHistory, RevokedDrop } from "../types.ts";

/** The leaderboard's samples may differ from the logs' by this share of the logs' total. */
export const CREDIT_TOLERANCE = 0.01;
/** A SIGKILL this soon after a shared step may have kept its new total from reaching the aux. */
export const KILL_RISK_MS = 2_000;

/**
 * The leaderboard's samples (summed over its entries) against Σ localSamples of the peers' shared
 * step lines, every incarnation: equal within ±1 %. Left out of the sum, by design: the shared steps
 * a peer logged after the aux dropped it for its revoked token (`revokedDrops`) — its passes are
 * refused from then on, so the swarm no longer counts it, while it averages on with the other
 * revoked peers until it notices. The details give each peer's sums and, to tell
 * where a difference comes from: the samples of shared steps taken just before a SIGKILL (the aux
 * may never have heard of them), those of shared steps logged after the platform's last recorded
 * step (`lastRecordedAt`, when given: the aux did not post them), and those of shared steps taken in
 * a group of one (a peer that saw no other trainer).
 */
export interface CreditInput {
  /** When the platform recorded its last step (Unix ms), if it recorded any. */
  readonly lastRecordedAt?: number;
  readonly revokedDrops?: readonly RevokedDrop[];
  /**
   * When each re-token began (its token revoked): a drop is about the incarnation that held the
   * token then, even when the aux logs it after that incarnation ended and the next one, with the
   * new token, started (the aux drops the old pass it still holds when its poll comes).
   */
  readonly revokedAt?: readonly number[];
}

export function checkCredit(
  leaderboard: Leaderboard,
  peers: readonly PeerHistory[],
  { lastRecordedAt, revokedDrops = [], revokedAt = [] }: CreditInput = {},
): CheckResult {
  const board = leaderboard.entries.reduce((sum, entry) => sum + entry.samples, 0);
  const byPeer = new Map<string, number>();
  let logs = 0;
  let atRisk = 0;
  let unrecorded = 0;
  let alone = 0;
  let afterRevocation = 0;
  for (const peer of peers) {
    const dropped = droppedAt(peer, revokedDrops, revokedAt);
    const shared = peer.steps.filter((line) => {
      if (!line.shared) return false;
      if (dropped === undefined || line.time <= dropped) return true;
      afterRevocation += line.localSamples;
      return false;
    });
    const sum = shared.reduce((total, line) => total + line.localSamples, 0);
    logs += sum;
    byPeer.set(peer.incarnation.name, (byPeer.get(peer.incarnation.name) ?? 0) + sum);
    for (const line of shared) {
      if (lastRecordedAt !== undefined && line.time > lastRecordedAt) unrecorded += line.localSamples;
      if (line.groupSize === 1) alone += line.localSamples;
    }
    const { endedAt, exit } = peer.incarnation;
    if (endedAt !== null && exit?.signal === "SIGKILL") {
      atRisk += shared
        .filter((line) => endedAt - line.time <= KILL_RISK_MS)
        .reduce((total, line) => total + line.localSamples, 0);
    }
  }
  const difference = board - logs;
  const share = logs === 0 ? (board === 0 ? 0 : Infinity) : difference / logs;
  const pass = logs > 0 && Math.abs(share) <= CREDIT_TOLERANCE;
  return {
    name: "credit",
    pass,
    summary:
      `leaderboard ${board} samples, peers' shared steps ${logs}: ${difference >= 0 ? "+" : ""}${difference} ` +
      `(${(share * 100).toFixed(3)} %, tolerance ±${CREDIT_TOLERANCE * 100} %)`,
    details: [
      ...(logs === 0 ? ["no peer logged a shared step"] : []),
      `shared steps logged after the aux dropped the peer for its revoked token (left out, not credited by design): ${afterRevocation} samples`,
      `per peer (all incarnations): ${[...byPeer].map(([name, sum]) => `${name} ${sum}`).join(", ")}`,
      ...leaderboard.entries.map(
        (entry) => `leaderboard: ${entry.username} ${entry.samples} samples, ${entry.peers} node(s)`,
      ),
      `shared steps within ${KILL_RISK_MS / 1000} s before a SIGKILL: ${atRisk} samples (what the aux may not have heard of)`,
      ...(lastRecordedAt === undefined
        ? []
        : [
            `shared steps logged after the platform's last recorded step (${new Date(lastRecordedAt).toISOString()}): ${unrecorded} samples`,
          ]),
      `shared steps in a group of one: ${alone} samples`,
    ],
  };
}

/**
 * When the aux first dropped this incarnation's node for a revoked token, during its run: a drop of
 * its PeerId whose revocation (the latest re-token before it, or the drop itself when none is
 * known) came while this incarnation ran.
 */
function droppedAt(
  peer: PeerHistory,
  drops: readonly RevokedDrop[],
  revokedAt: readonly number[],
): number | undefined {
  const { startedAt, endedAt } = peer.incarnation;
  const revocationOf = (time: number) =>
    revokedAt.filter((at) => at <= time).reduce((latest, at) => Math.max(latest, at), -Infinity);
  const times = drops
    .filter((drop) => {
      if (drop.peerId !== peer.peerId) return false;
      const revoked = revokedAt.length === 0 ? drop.time : revocationOf(drop.time);
      return revoked >= startedAt && (endedAt === null || revoked <= endedAt) && drop.time >= startedAt;
    })
    .map((drop) => drop.time);
  return times.length === 0 ? undefined : Math.min(...times);
}
