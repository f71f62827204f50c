import type { AppContext } from "../context.ts";
import { findExperiment, membershipOf, type Membership } from "./experiment-access.ts";
import type { SessionUser } from "../records.ts";

/** What the signed-in user is to an experiment, for the join box on its page. */
export async function readMembership(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<{ status: Membership }> {
  const experiment = await findExperiment(ctx, id);
  return { status: await membershipOf(ctx, experiment, user.id) };
}
