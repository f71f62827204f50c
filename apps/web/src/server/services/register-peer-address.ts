import type { RegisterAddressRequest } from "../../api/schemas/peer.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { formatPeerAddresses } from "./join-experiment.ts";
import type { AuxCaller } from "../records.ts";

/**
 * An aux peer registers where other peers can dial it; joins then hand these addresses out as
 * initial peers. Every multiaddr must end with `/p2p/<the caller's PeerId>`, so an aux peer can only
 * advertise itself. The list replaces the previous one and is stored in Peer.address, separated by
 * single spaces.
 */
export async function registerPeerAddress(
  ctx: AppContext,
  caller: AuxCaller,
  input: RegisterAddressRequest,
): Promise<{ ok: true }> {
  const suffix = `/p2p/${caller.peer.peerId}`;
  const issues = input.multiaddrs.flatMap((multiaddr, index) =>
    multiaddr.endsWith(suffix) && multiaddr.length > suffix.length
      ? []
      : [{ path: `multiaddrs.${index}`, message: `must end with ${suffix}, this node's PeerId` }],
  );
  const first = issues[0];
  if (first !== undefined) {
    throw new AppError(AppErrorCode.INVALID_INPUT, `${first.path}: ${first.message}`, { issues });
  }
  await ctx.db.peer.update({
    where: { id: caller.peer.id },
    data: { address: formatPeerAddresses([...new Set(input.multiaddrs)]), lastSeenAt: new Date(ctx.now()) },
  });
  return { ok: true };
}
