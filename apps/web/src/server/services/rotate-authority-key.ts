import { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import { newAuthorityKey } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import type { SessionUser } from "../http/session.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";

/**
 * The organizer replaces the experiment's authority key pair. Passes and configs signed by the old
 * key stop verifying; peers get new ones the next time they join (which is how they refresh passes).
 * The new secret key is sealed with the new key version as associated data.
 */

export const rotateAuthorityKeyInputSchema = z.strictObject({});

export async function rotateAuthorityKey(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  const keyVersion = experiment.authorityKeyVersion + 1;
  const key = newAuthorityKey(ctx.env.sealingSecrets, { experimentId: id, keyVersion });
  // Conditional on the version read, so two concurrent rotations cannot both seal for one version.
  const { count } = await ctx.db.experiment.updateMany({
    where: { id, authorityKeyVersion: experiment.authorityKeyVersion },
    data: {
      authorityPublicKey: key.publicKey,
      authoritySecretKey: key.sealedSecretKey,
      authorityKeyVersion: keyVersion,
    },
  });
  if (count !== 1) {
    throw new AppError(AppErrorCode.CONFLICT, "the key was rotated concurrently; reload and try again");
  }
  ctx.logger.info({ experimentId: id, keyVersion }, "authority key rotated");
  return experimentViewOf(ctx, await ctx.db.experiment.findUniqueOrThrow({ where: { id } }));
}
