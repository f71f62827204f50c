import { PeerRole } from "@barnraise/protocol";
import type { AppContext } from "../context.ts";
import { findExperiment } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/** The caller's own peer tokens for an experiment, newest first; never the secret or its hash. */

export interface PeerTokenSummary {
  readonly id: string;
  readonly label: string;
  readonly role: PeerRole;
  /** Issued to one key of the volunteer's browser, not a token to copy (see join-from-browser.ts). */
  readonly browser: boolean;
  /** The token's first characters, to tell tokens apart. */
  readonly prefix: string;
  readonly createdAt: string;
  readonly lastUsedAt: string | null;
  readonly revokedAt: string | null;
}

export function toPeerTokenSummary(token: {
  id: string;
  label: string;
  role: string;
  browser: boolean;
  prefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}): PeerTokenSummary {
  return {
    id: token.id,
    label: token.label,
    role: parsePeerRole(token.role),
    browser: token.browser,
    prefix: token.prefix,
    createdAt: token.createdAt.toISOString(),
    lastUsedAt: token.lastUsedAt?.toISOString() ?? null,
    revokedAt: token.revokedAt?.toISOString() ?? null,
  };
}

export function parsePeerRole(value: string): PeerRole {
  if (value === PeerRole.trainer || value === PeerRole.aux) return value;
  throw new Error(`unknown peer role in the database: ${value}`);
}

export async function listPeerTokens(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<PeerTokenSummary[]> {
  await findExperiment(ctx, id);
  const tokens = await ctx.db.peerToken.findMany({
    where: { experimentId: id, userId: user.id },
    orderBy: [{ createdAt: "desc" }, { id: "asc" }],
    select: {
      id: true,
      label: true,
      role: true,
      browser: true,
      prefix: true,
      createdAt: true,
      lastUsedAt: true,
      revokedAt: true,
    },
  });
  return tokens.map(toPeerTokenSummary);
}
