import type { AppContext } from "../context.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { SessionUser } from "../records.ts";

/**
 * A volunteer retires one of their machines (a node key): the key may not join again, and its
 * signed requests are refused (NODE_RETIRED), so a running machine leaves at its next control poll.
 * A machine the swarm no longer has gives its place under the experiment's limits up at once; one
 * an aux still reports (a machine that ignores the refusal) keeps it while its pass is valid, so
 * retiring cannot make room for more keys. Only the node's owner may; NOT_FOUND for anyone else's node, so node ids tell
 * a stranger nothing. Retiring a retired node changes nothing.
 */
export async function retireNode(
  ctx: AppContext,
  user: SessionUser,
  nodeId: string,
): Promise<{ id: string; retiredAt: string }> {
  const node = await ctx.db.peer.findUnique({
    where: { id: nodeId },
    select: { userId: true, retiredAt: true },
  });
  if (node === null || node.userId !== user.id) {
    throw new AppError(AppErrorCode.NOT_FOUND, `you have no node ${nodeId}`);
  }
  if (node.retiredAt !== null) return { id: nodeId, retiredAt: node.retiredAt.toISOString() };
  const retiredAt = new Date(ctx.now());
  await ctx.db.peer.updateMany({ where: { id: nodeId, retiredAt: null }, data: { retiredAt } });
  return { id: nodeId, retiredAt: retiredAt.toISOString() };
}
