import { z } from "zod";

/** The validator's flags: trainer nodes whose contributions the aux found raising the held-out loss. */

export const validatorFlagSchema = z
  .strictObject({
    peerId: z.string().meta({ description: "The flagged node's libp2p PeerId" }),
    username: z.string().meta({ description: "The node's owner" }),
    ownerStatus: z.enum(["organizer", "pending", "approved", "banned", "none"]).meta({
      description:
        "The owner's standing in the experiment: its organizer, their allowlist entry's status, or none (no entry)",
    }),
    tokenRevoked: z.boolean().meta({ description: "Whether the token the node joined with is revoked" }),
    epoch: z.number().int().meta({ description: "The epoch of the latest sample that hurt" }),
    generation: z.number().int().meta({ description: "The run generation of that sample" }),
    firstHurtEpoch: z
      .number()
      .int()
      .meta({ description: "The earliest epoch of that generation at which the node's contributions hurt" }),
    baselineLoss: z
      .number()
      .meta({ description: "The held-out loss at the aux's state (validator's subset)" }),
    lossAfter: z
      .number()
      .nullable()
      .meta({ description: "The loss after the node's step; null: not finite" }),
    medianDelta: z.number().meta({ description: "The median change of loss of the round's senders' steps" }),
    normRatio: z.number().meta({ description: "The contribution's norm over the round's median norm" }),
    hurtSamples: z.number().int(),
    recentSamples: z.number().int(),
    reports: z.number().int().meta({ description: "Reports the aux sent about this node" }),
    firstFlaggedAt: z.iso.datetime(),
    reportedAt: z.iso.datetime().meta({ description: "When the latest report arrived" }),
  })
  .meta({ id: "ValidatorFlag" });
export type ValidatorFlagView = z.infer<typeof validatorFlagSchema>;

export const validatorFlagListSchema = z
  .strictObject({
    flags: z.array(validatorFlagSchema).meta({ description: "The most recently reported first" }),
  })
  .meta({ id: "ValidatorFlagList" });
