import { z } from "zod";

/**
 * What every bench peer process is told about itself (argv[2], JSON): its place, its identity and
 * pass in the experiment, where it listens and whom it dials first.
 */
export const peerIdentityFields = {
  index: z.number().int().min(0),
  experimentId: z.string(),
  secretKey: z.string(),
  authorityPublicKey: z.string(),
  pass: z.string(),
  listen: z.array(z.string()),
  bootstrap: z.array(z.string()),
};

/** A fixed link capacity for the load balancer, in bytes per second. */
export const bandwidthSchema = z.strictObject({
  uploadBytesPerSecond: z.number().positive(),
  downloadBytesPerSecond: z.number().positive(),
});
