import { StateHolder } from "./roles/state-holder.ts";
import { joinAsNode, logInto, openNodeSession, peerToken } from "@barnraise/swarm";
import { fileNodeStore, listenable, loadNodeTransports, prometheusNodeMetrics } from "@barnraise/swarm/node";
import { AuxPlatformClient } from "./platform-client.ts";
import type { AuxRunOptions } from "./aux-run-options.ts";
import { runRoles } from "./aux-roles.ts";

export type { AuxRunOptions } from "./aux-run-options.ts";

/**
 * The organizer's aux peer (DESIGN §6): a stable node of the swarm that
 * - bootstraps the swarm and relays for peers behind NAT (aux mode of the swarm node),
 * - registers its address, so join responses list it as an initial peer,
 * - monitors: aggregates the peers' signed progress per step and posts it to the platform,
 * - checkpoints: every K steps downloads the latest state and uploads it,
 * - evaluates each uploaded checkpoint on the dataset's test split, for the platform's chart,
 * - keeps the run's state: it serves its latest checkpoint (loaded from the platform at start,
 *   then each one it uploads) as a state donor, so a run survives all its trainers leaving,
 * - follows the organizer's run control (pause, bans, rollback) and spreads it to the swarm,
 * - reports the swarm's liveness, and tells the platform when the swarm resumed behind the
 *   recorded steps (the curve then continues on a new timeline),
 * - helps averaging as a reducer with weight 0,
 * - validates what trainers contribute to the rounds it helps, and flags those whose contributions
 *   raise the held-out loss on the manage page.
 * Runs until `stopSignal`; throws JoinError when the platform refuses it.
 */
export async function runAux(options: AuxRunOptions): Promise<void> {
  const { logger, stopSignal } = options;
  const node = await joinAsNode({
    server: options.server,
    credential: peerToken(options.token),
    store: fileNodeStore(options.identityPath),
    role: "aux",
    log: logInto(logger),
    signal: stopSignal,
  });
  const { joined } = node;
  const { config } = joined;
  logger.info(
    { experimentId: joined.experiment.id, checkpointEverySteps: config.checkpoints.everySteps },
    `joined experiment "${joined.experiment.name}" as its aux peer`,
  );

  // The state this aux serves as a donor, once its roles exist.
  const served: { holder?: StateHolder } = {};
  const networking = await loadNodeTransports();
  const { usable, dropped } = listenable(networking, options.listen);
  if (networking.withoutWebRtc !== undefined) {
    logger[dropped.length > 0 ? "warn" : "info"](
      { reason: networking.withoutWebRtc, notListeningOn: dropped },
      "no WebRTC-direct on this machine: browser tabs reach the aux over WebSockets only",
    );
  }
  const session = await openNodeSession(node, {
    mode: "aux",
    listen: usable,
    transports: networking.transports,
    announce: options.announce,
    peers: options.peers,
    logger,
    metrics: prometheusNodeMetrics(options.metrics),
    swarm: () => ({ getState: () => served.holder?.state ?? null }),
  });
  const { swarm } = session;
  const client = new AuxPlatformClient(session.platform);
  try {
    const addresses = registrableAddresses(options.announce, swarm.node.multiaddrs(), swarm.peerId);
    logger.info({ peerId: swarm.peerId, addresses: swarm.node.multiaddrs() }, "listening");
    const signal = AbortSignal.any([stopSignal, session.leaving]);
    await runRoles({ options, joined, session, client, addresses, signal, served });
  } finally {
    await session.close();
  }
  if (session.refused !== undefined) throw session.refused;
  logger.info("stopped");
}

/**
 * The addresses to register: the announced ones if given, else the listen addresses other machines
 * can dial (not loopback unless that is all there is), each ending with /p2p/<peer id>, at most 8.
 */
export function registrableAddresses(
  announce: readonly string[],
  listening: readonly string[],
  peerId: string,
): string[] {
  const suffix = `/p2p/${peerId}`;
  const withId = (address: string) => (address.endsWith(suffix) ? address : `${address}${suffix}`);
  const candidates = (announce.length > 0 ? announce : listening).filter(
    (address) => !address.includes("/p2p-circuit"),
  );
  const routable = candidates.filter((address) => !/^\/ip[46]\/(127\.|::1\/)/.test(address));
  const chosen = routable.length > 0 ? routable : candidates;
  return [...new Set(chosen.map(withId))].slice(0, 8);
}
