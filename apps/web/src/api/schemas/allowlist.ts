import { z } from "zod";
import { usernameSchema } from "@barnraise/protocol";

/** Allowlists: who may join an experiment, and join requests. */

export const AllowlistStatus = { pending: "pending", approved: "approved", banned: "banned" } as const;
export type AllowlistStatus = (typeof AllowlistStatus)[keyof typeof AllowlistStatus];

export const addToAllowlistInputSchema = z.strictObject({ username: usernameSchema });

export type AddToAllowlistInput = z.infer<typeof addToAllowlistInputSchema>;

export const setAllowlistStatusInputSchema = z.strictObject({
  status: z.enum([AllowlistStatus.approved, AllowlistStatus.banned]),
});

export type SetAllowlistStatusInput = z.infer<typeof setAllowlistStatusInputSchema>;

export const addToAllowlistRequestSchema = addToAllowlistInputSchema.meta({ id: "AddToAllowlistRequest" });

export const setAllowlistStatusRequestSchema = setAllowlistStatusInputSchema.meta({
  id: "SetAllowlistStatusRequest",
});

export const allowlistEntrySchema = z
  .strictObject({
    username: z.string(),
    status: z.enum(["pending", "approved", "banned"]),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: "AllowlistEntry" });

export const allowlistSchema = z
  .strictObject({
    entries: z.array(allowlistEntrySchema).meta({ description: "Pending first, then approved, then banned" }),
  })
  .meta({ id: "Allowlist" });
