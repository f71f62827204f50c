import { PeerRole } from "@barnraise/protocol";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { findExperiment, membershipOf } from "./experiment-access.ts";
import { toPeerTokenSummary, type PeerTokenSummary } from "./list-peer-tokens.ts";
import { generatePeerToken } from "./peer-tokens.ts";
import type { SessionUser } from "../records.ts";
import type { CreatePeerTokenInput } from "../../api/schemas/tokens.ts";

/**
 * A volunteer (trainer token) or the organizer (aux token) creates a peer token. The secret is in
 * this response only: the platform keeps its SHA-256 and a short prefix.
 */

export interface CreatedPeerToken extends PeerTokenSummary {
  /** The secret, shown once. */
  readonly token: string;
}

export async function createPeerToken(
  ctx: AppContext,
  user: SessionUser,
  id: string,
  input: CreatePeerTokenInput,
): Promise<CreatedPeerToken> {
  const experiment = await findExperiment(ctx, id);
  const role = input.role ?? PeerRole.trainer;
  const membership = await membershipOf(ctx, experiment, user.id);
  if (role === PeerRole.aux && membership !== "organizer") {
    throw new AppError(AppErrorCode.FORBIDDEN, "only the organizer may create aux tokens");
  }
  if (membership === "banned") throw new AppError(AppErrorCode.BANNED, "you are banned from this experiment");
  if (membership !== "organizer" && membership !== "approved") {
    throw new AppError(
      AppErrorCode.NOT_ALLOWLISTED,
      membership === "pending"
        ? "your request to join has not been approved yet"
        : "you are not on this experiment's allowlist; ask to join first",
    );
  }
  const secret = generatePeerToken();
  const token = await ctx.db.peerToken.create({
    data: {
      experimentId: id,
      userId: user.id,
      role,
      label: input.label ?? "",
      tokenHash: secret.tokenHash,
      prefix: secret.prefix,
    },
  });
  ctx.logger.info(
    { experimentId: id, username: user.username, role, tokenId: token.id },
    "peer token created",
  );
  return { token: secret.token, ...toPeerTokenSummary(token) };
}
