import type { MetricsRegister } from "@libp2p/gossipsub/metrics";

/**
 * Gossipsub's own traffic counters for one node, through its MetricsRegister hook (see
 * SwarmNodeOptions.pubsubMetrics): "msgs" the published messages carried in RPC frames (duplicates
 * and forwards included), "frames" the RPC frames, "bytes" their encoded size (control messages
 * included: subscriptions, GRAFT/PRUNE, IHAVE/IWANT, IDONTWANT).
 */
const COUNTED = {
  gossipsub_rpc_recv_message_total: "msgsIn",
  gossipsub_rpc_sent_message_total: "msgsOut",
  gossipsub_rpc_recv_count_total: "framesIn",
  gossipsub_rpc_sent_count_total: "framesOut",
  gossipsub_rpc_recv_bytes_total: "bytesIn",
  gossipsub_rpc_sent_bytes_total: "bytesOut",
} as const;

export type GossipCounter = (typeof COUNTED)[keyof typeof COUNTED];
export type GossipCounts = Record<GossipCounter, number>;

export function zeroCounts(): GossipCounts {
  return { msgsIn: 0, msgsOut: 0, framesIn: 0, framesOut: 0, bytesIn: 0, bytesOut: 0 };
}

/** A MetricsRegister that sums the unlabelled counters above into `counts` and ignores the rest. */
export function gossipCounters(): { register: MetricsRegister; counts: GossipCounts } {
  const counts = zeroCounts();
  const ignored = { inc: () => undefined, set: () => undefined, addCollect: () => undefined };
  const histogram = { startTimer: () => () => undefined, observe: () => undefined, reset: () => undefined };
  const register = {
    gauge: (config: { name: string }) => {
      const key = (COUNTED as Record<string, GossipCounter | undefined>)[config.name];
      if (key === undefined) return ignored;
      return {
        inc: (value?: number) => {
          counts[key] += value ?? 1;
        },
        set: () => undefined,
        addCollect: () => undefined,
      };
    },
    histogram: () => histogram,
    avgMinMax: () => ({ set: () => undefined }),
  } as unknown as MetricsRegister;
  return { register, counts };
}
