import { z } from "zod";
import { addToAllowlistInputSchema } from "../../server/services/add-to-allowlist.ts";
import { setAllowlistStatusInputSchema } from "../../server/services/set-allowlist-status.ts";

/** Allowlists: who may join an experiment, and join requests. */

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
