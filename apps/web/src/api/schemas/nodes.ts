import { PAUSE_REASONS } from "@barnraise/protocol";
import { z } from "zod";

/** "My nodes": the signed-in user's peers and whether each one counts. */

/** The reasons a node is not counted, in the order they are checked. */
export const PeerNotCountedReason = {
  retired: "retired",
  experimentPaused: "experiment_paused",
  banned: "banned",
  notAllowlisted: "not_allowlisted",
  tokenRevoked: "token_revoked",
  passExpired: "pass_expired",
  stale: "stale",
  refusedBySwarm: "refused_by_swarm",
  notInSwarm: "not_in_swarm",
  paused: "paused",
  joining: "joining",
  notAveraging: "not_averaging",
} as const;
export type PeerNotCountedReason = (typeof PeerNotCountedReason)[keyof typeof PeerNotCountedReason];

export const nodeSchema = z
  .strictObject({
    id: z.string(),
    experimentId: z.string(),
    experimentName: z.string(),
    peerId: z.string().meta({ description: "The node's libp2p PeerId" }),
    role: z.enum(["trainer", "aux"]),
    address: z.string().nullable(),
    tokenLabel: z.string(),
    tokenPrefix: z.string(),
    lastSeenAt: z.iso.datetime(),
    passExpiresAt: z.iso.datetime(),
    counted: z.boolean(),
    reason: z
      .enum(Object.values(PeerNotCountedReason))
      .nullable()
      .meta({ description: "Why the node is not counted (null when it is), checked in the listed order" }),
    swarmSeenAt: z.iso.datetime().nullable().meta({
      description: "When an aux peer last reported the swarm accepting the node; null if never",
    }),
    swarmRefusal: z
      .strictObject({
        at: z.iso.datetime(),
        code: z.string().meta({ description: "The refusal's code, e.g. PASS_REVOKED" }),
        reason: z.string(),
      })
      .nullable()
      .meta({ description: "The swarm's latest refusal of the node's pass, as an aux peer reported it" }),
    pauseReasons: z.array(z.enum(PAUSE_REASONS)).nullable().meta({
      description:
        "Trainers: why its volunteer's rules hold it now (in-use, busy, battery, schedule, too-hot, hidden, volunteer), as the swarm last reported; null while it trains",
    }),
    retiredAt: z.iso.datetime().nullable().meta({
      description: "When its owner retired the machine (its key may not join again); null while it is not",
    }),
    holdsPlace: z.boolean().meta({
      description:
        "Whether it takes one of its token's places under the experiment's limits of machines per token and per volunteer: a trainer, not retired, with a live pass",
    }),
  })
  .meta({ id: "Node" });

export const retiredNodeSchema = z
  .strictObject({ id: z.string(), retiredAt: z.iso.datetime() })
  .meta({ id: "RetiredNode" });

export const nodeListSchema = z.strictObject({ nodes: z.array(nodeSchema) }).meta({ id: "NodeList" });
