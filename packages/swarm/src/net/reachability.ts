import { multiaddr } from "@multiformats/multiaddr";
import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { defineMethod, type PeerIdString, type Rpc, type RpcIncoming } from "../rpc/rpc.ts";

/**
 * Whether the swarm can open connections to a peer: the "dial-back" exchange, which aux peers (on
 * the public side) serve. A peer names the TCP ports it listens on; the aux dials each at the
 * address it sees the request come from (the peer's public address, its router's when it is
 * behind NAT) on a fresh connection, whose Noise handshake proves that the answer came from the
 * asking peer and not from whoever else sits at that address. A peer behind a NAT without port
 * forwarding is not reachable that way.
 *
 * The aux only ever dials the address the request came from, at most MAX_PORTS ports, so the
 * exchange cannot make it connect to a third party; members only (the rpc layer checks passes),
 * one check per peer at a time and MAX_CONCURRENT_CHECKS in all.
 */

const MAX_PORTS = 8;
const MAX_CONCURRENT_CHECKS = 16;
/** How long the aux tries one port. */
const DIAL_TIMEOUT_MS = 5_000;

export const dialBackMethod = defineMethod({
  name: "dial-back",
  request: z.strictObject({
    ports: z.array(z.number().int().min(1).max(65_535)).min(1).max(MAX_PORTS),
  }),
  response: z.strictObject({
    /** The address the aux reached this peer at, or absent when it reached it at none. */
    reachedAt: z.string().max(256).optional(),
    /** The address the request came from, as the aux saw it. */
    observed: z.string().max(256),
    /** Why it was not reached, when it was not. */
    reason: z.string().max(512).optional(),
  }),
  maxFrameBytes: 0,
});

export type DialBackAnswer = z.output<(typeof dialBackMethod)["response"]>;

export interface DialBackServerOptions {
  readonly rpc: Rpc;
  /** Opens a new connection to `address` (which ends with the peer's /p2p/ id) and closes it. */
  readonly dialFresh: (address: string, signal: AbortSignal) => Promise<void>;
}

/** The aux side: serves dial-back checks. */
export class DialBackServer {
  readonly #options: DialBackServerOptions;
  readonly #checking = new Set<PeerIdString>();

  constructor(options: DialBackServerOptions) {
    this.#options = options;
  }

  start(): void {
    this.#options.rpc.handle(dialBackMethod, (incoming) => this.#serve(incoming));
  }

  stop(): void {
    this.#options.rpc.unhandle(dialBackMethod);
  }

  async #serve(incoming: RpcIncoming<{ ports: number[] }, DialBackAnswer>): Promise<void> {
    const peer = incoming.from.peerId;
    const observed = incoming.from.remoteAddr ?? "";
    const host = hostOf(observed);
    if (host === undefined) {
      await incoming.respond({
        observed,
        reason: observed.includes("/p2p-circuit")
          ? "the check came through a relay, so its address says nothing about this peer"
          : `cannot tell the address the check came from (${observed || "unknown"})`,
      });
      return;
    }
    if (this.#checking.has(peer) || this.#checking.size >= MAX_CONCURRENT_CHECKS) {
      throw new SwarmError(SwarmErrorCode.BUSY, "busy with other dial-back checks; try again later");
    }
    this.#checking.add(peer);
    try {
      const failures: string[] = [];
      for (const port of [...new Set(incoming.head.ports)]) {
        const address = `${host}/tcp/${port}/p2p/${peer}`;
        const signal = AbortSignal.any([incoming.signal, AbortSignal.timeout(DIAL_TIMEOUT_MS)]);
        try {
          await this.#options.dialFresh(address, signal);
          await incoming.respond({ reachedAt: address, observed });
          return;
        } catch (error) {
          if (incoming.signal.aborted) throw error;
          failures.push(`${address}: ${error instanceof Error ? error.message : String(error)}`);
        }
      }
      await incoming.respond({ observed, reason: failures.join("; ").slice(0, 512) });
    } finally {
      this.#checking.delete(peer);
    }
  }
}

/** "/ip4/1.2.3.4" or "/ip6/::1" from a TCP multiaddr; undefined for relayed or other addresses. */
function hostOf(address: string): string | undefined {
  if (address.includes("/p2p-circuit")) return undefined;
  try {
    const [first] = multiaddr(address).getComponents();
    if (first === undefined || (first.name !== "ip4" && first.name !== "ip6") || first.value === undefined)
      return undefined;
    return `/${first.name}/${first.value}`;
  } catch {
    return undefined;
  }
}

/** What a peer learned about itself. */
export type Reachability =
  | { readonly reachable: true; readonly address: string; readonly checkedBy: PeerIdString }
  | { readonly reachable: false; readonly observed?: string; readonly reason: string };

/**
 * Asks the aux peers in turn to dial this peer back at `ports`; the first that answers decides.
 * Resolves unreachable (with the reasons) when none could reach it or none answered.
 */
export async function checkReachability(
  rpc: Rpc,
  auxPeers: readonly PeerIdString[],
  ports: readonly number[],
  signal?: AbortSignal,
): Promise<Reachability> {
  if (ports.length === 0) return { reachable: false, reason: "this peer listens on no TCP port" };
  if (auxPeers.length === 0) return { reachable: false, reason: "no aux peer is connected to check" };
  const reasons: string[] = [];
  for (const aux of auxPeers) {
    try {
      const asked = [...new Set(ports)].slice(0, MAX_PORTS);
      const answer = await rpc.request(
        aux,
        dialBackMethod,
        { ports: asked },
        { timeoutMs: asked.length * DIAL_TIMEOUT_MS + 5_000, ...(signal === undefined ? {} : { signal }) },
      );
      if (answer.reachedAt !== undefined)
        return { reachable: true, address: answer.reachedAt, checkedBy: aux };
      if (answer.reason !== undefined && !answer.observed.includes("/p2p-circuit")) {
        return { reachable: false, observed: answer.observed, reason: answer.reason };
      }
      reasons.push(answer.reason ?? "no reason given");
    } catch (error) {
      if (signal?.aborted === true) throw error;
      reasons.push(`${aux}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return { reachable: false, reason: reasons.join("; ") };
}

/** The TCP ports among `addresses` (direct ones only). */
export function tcpPorts(addresses: readonly string[]): number[] {
  const ports = new Set<number>();
  for (const address of addresses) {
    if (address.includes("/p2p-circuit")) continue;
    const match = /\/tcp\/(\d+)/.exec(address);
    if (match?.[1] !== undefined) ports.add(Number(match[1]));
  }
  return [...ports];
}
