import { z } from "zod";
import { PeerRole } from "@barnraise/protocol";

/** Peer tokens: the secrets nodes join with. Only creation returns the secret. */

export const createPeerTokenInputSchema = z.strictObject({
  label: z.string().trim().max(64).optional(),
  role: z.enum([PeerRole.trainer, PeerRole.aux]).optional(),
});

export type CreatePeerTokenInput = z.infer<typeof createPeerTokenInputSchema>;

export const createPeerTokenRequestSchema = createPeerTokenInputSchema.meta({
  id: "CreatePeerTokenRequest",
  description: 'role defaults to "trainer"; aux tokens are for the organizer\'s aux peers',
});

const summaryShape = {
  id: z.string(),
  label: z.string(),
  role: z.enum(["trainer", "aux"]),
  browser: z.boolean().meta({
    description:
      "Issued to a browser of the signed-in volunteer (Contribute from this browser), for one key; its secret is never shown",
  }),
  prefix: z.string().meta({ description: "The token's first characters, to tell tokens apart" }),
  createdAt: z.iso.datetime(),
  lastUsedAt: z.iso.datetime().nullable(),
  revokedAt: z.iso.datetime().nullable(),
};

export const peerTokenSummarySchema = z.strictObject(summaryShape).meta({ id: "PeerTokenSummary" });

export const createdPeerTokenSchema = z
  .strictObject({
    token: z.string().meta({ description: "The secret: shown once, store it now" }),
    ...summaryShape,
  })
  .meta({ id: "CreatedPeerToken" });

export const peerTokenListSchema = z
  .strictObject({ tokens: z.array(peerTokenSummarySchema) })
  .meta({ id: "PeerTokenList" });
