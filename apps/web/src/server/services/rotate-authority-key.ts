import { decodePublicKey, signAuthorityRotation } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import { newAuthorityKey, openAuthorityKeyPair } from "../authority-keys.ts";
import type { AppContext } from "../context.ts";
import { requireOrganizer } from "./experiment-access.ts";
import { experimentViewOf, type ExperimentView } from "./read-experiment.ts";
import type { SessionUser } from "../records.ts";

/**
 * The organizer replaces the experiment's authority key pair, and the old key signs a rotation
 * certificate naming the new one (protocol/authority-rotation.ts), stored as an AuthorityRotation
 * row in the same transaction. Join and run control answers list the latest certificates, so a
 * running node follows the new key within seconds (it asks for the run control every 5 s) and a
 * node that restarts after a rotation it missed follows the chain from the key it pinned. Passes of
 * the old key issued before the rotation keep working for DEFAULT_ROTATION_GRACE_MS, and requests
 * addressed to the old key are taken as long (peer-verifier-cache.ts); after that only the new
 * key counts. The run control's version is bumped, so the control signed by the new key replaces
 * the old one on every node. The new secret key is sealed with the new key version as associated data.
 */

export async function rotateAuthorityKey(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<ExperimentView> {
  const experiment = await requireOrganizer(ctx, id, user);
  const keyVersion = experiment.authorityKeyVersion + 1;
  // Opened before it is replaced: the old key vouches for the new one.
  const previous = openAuthorityKeyPair(experiment, ctx.env.sealingSecrets);
  const key = newAuthorityKey(ctx.env.sealingSecrets, { experimentId: id, keyVersion });
  const rotatedAt = ctx.now();
  const certificate = signAuthorityRotation(ctx.crypto, previous, {
    experimentId: id,
    keyVersion,
    publicKey: decodePublicKey(key.publicKey),
    rotatedAt,
  });
  await ctx.db.$transaction(async (tx) => {
    // Conditional on the version read, so two concurrent rotations cannot both seal for one version
    // (and the certificate is signed by the key this update replaces).
    const { count } = await tx.experiment.updateMany({
      where: { id, authorityKeyVersion: experiment.authorityKeyVersion },
      data: {
        authorityPublicKey: key.publicKey,
        authoritySecretKey: key.sealedSecretKey,
        authorityKeyVersion: keyVersion,
        // Nodes keep the run control of the highest version: a new version, signed by the new
        // key, replaces the old key's everywhere, pushed from node to node.
        controlVersion: { increment: 1 },
      },
    });
    if (count !== 1) {
      throw new AppError(AppErrorCode.CONFLICT, "the key was rotated concurrently; reload and try again");
    }
    await tx.authorityRotation.create({
      data: {
        experimentId: id,
        keyVersion,
        publicKey: key.publicKey,
        previousPublicKey: experiment.authorityPublicKey,
        certificate,
        rotatedAt: new Date(rotatedAt),
      },
    });
  });
  ctx.logger.info({ experimentId: id, keyVersion }, "authority key rotated");
  return experimentViewOf(ctx, await ctx.db.experiment.findUniqueOrThrow({ where: { id } }));
}
