import { toBase64Url, type PeerRole } from "@barnraise/protocol";
import type { Logger } from "pino";
import type { AveragingMode } from "../p2p/hello.ts";
import type { SwarmTransports } from "../p2p/swarm-node.ts";
import { AuthorityKeys } from "../platform/authority-keys.ts";
import { JoinError, JoinErrorCode } from "../platform/join-error.ts";
import type { JoinCredential } from "../platform/join-client.ts";
import { joinExperiment } from "../platform/join-experiment.ts";
import type { JoinedExperiment } from "../platform/join-response.ts";
import { createPassRefresher } from "../platform/pass-refresher.ts";
import { PlatformClient } from "../platform/platform-client.ts";
import { pollRunControl } from "../platform/control-poller.ts";
import type { Identity, NodeStore } from "../identity.ts";
import { silentMetrics, type MetricsServer, type SwarmMetrics } from "../metrics/swarm-metrics.ts";
import { Swarm, type SwarmOptions } from "../swarm.ts";

/**
 * The life of a node that every program runs the same way (DESIGN §5): its identity, its join
 * (retried while the platform is unreachable or the run paused, the authority pinned), then its
 * session in the swarm: the experiment's authority following key rotations, the pass refreshed
 * before it runs out, the platform client, the swarm itself, its metrics and the run control. A
 * refusal by the platform, wherever it comes from (a pass refresh, the run control), goes through
 * `NodeSession.refuse`: logged once, and the node leaves (`leaving`).
 */

/** One line of the node's log, as the program shows it (the volunteer's display, the aux's logger). */
export type NodeLog = (
  level: "info" | "warn" | "error",
  message: string,
  fields?: Record<string, unknown>,
) => void;

/** A node's log lines into a pino logger (the aux's, the doctor's). */
export function logInto(logger: Logger): NodeLog {
  return (level, message, fields) => {
    logger[level](fields ?? {}, message);
  };
}

export interface NodeJoinOptions {
  readonly server: URL;
  /** A program's peer token, or the signed-in session of the page a browser node runs in. */
  readonly credential: JoinCredential;
  /** Where the node keeps its identity and authority pin. */
  readonly store: NodeStore;
  /** The pass role this program runs as: a volunteer's token for a trainer, an aux token for an aux. */
  readonly role: PeerRole;
  readonly log: NodeLog;
  /** Cancels the waits of the join (a stop before the node is in). */
  readonly signal: AbortSignal;
}

/** A node that joined: its identity and the verified join. */
export interface JoinedNode {
  readonly options: NodeJoinOptions;
  readonly identity: Identity;
  readonly joined: JoinedExperiment;
}

/**
 * Loads (or creates) the node's identity and joins the experiment its credential names. Throws
 * JoinError when the platform refuses the credential for good or a token is of another role, and
 * what the store throws for an identity it cannot use.
 */
export async function joinAsNode(options: NodeJoinOptions): Promise<JoinedNode> {
  const { log } = options;
  const { store } = options;
  const identity = await store.loadOrCreateIdentity();
  log("info", `${identity.created ? "created" : "loaded"} identity ${store.location}`, {
    peerId: identity.peerId,
  });
  const joined = await joinExperiment({
    server: options.server,
    credential: options.credential,
    keyPair: identity.keyPair,
    pins: store.pins,
    signal: options.signal,
    onRetry: (attempt, delayMs, error) => {
      log("warn", `cannot join yet: ${error.message}; retrying in ${Math.ceil(delayMs / 1000)} s`, {
        attempt,
        code: error.code,
      });
    },
    onPaused: (error, retryMs) => {
      log("warn", `${error.message}; asking again in ${retryMs / 1000} s`);
    },
    onRepinned: (previous, experimentId) => {
      log("warn", `this token is for another experiment than ${previous}; pinning the new one's key`, {
        experimentId,
      });
    },
  });
  if (options.role === "aux" && joined.pass.role !== "aux") {
    throw new JoinError(
      JoinErrorCode.TOKEN_INVALID,
      "this is a volunteer's token; an aux peer needs an aux token (the organizer creates one on the experiment's manage page)",
    );
  }
  return { options, identity, joined };
}

/**
 * What the node's role gives the swarm: the state it serves, the volunteer's traffic caps, and the
 * rest of `SwarmOptions` it sets.
 */
export type RoleSwarmOptions = Pick<SwarmOptions, "getState" | "loadCheckpoint" | "aloneAfterMs" | "caps">;

export interface NodeSessionOptions {
  readonly mode: AveragingMode;
  /** The runtime's libp2p transports besides circuit relay; TCP and WebSockets by default (Node.js). */
  readonly transports?: SwarmTransports;
  /** Listen multiaddrs; the swarm's default when empty. */
  readonly listen: readonly string[];
  /** Addresses to announce instead of the listen addresses (an aux's public name). */
  readonly announce?: readonly string[];
  /** Peers to join through besides the platform's initial peers. */
  readonly peers: readonly string[];
  /** The swarm's logger. */
  readonly logger: Logger;
  /** Where the node records what it measures, and how it serves that (default: nowhere, not served). */
  readonly metrics?: NodeMetrics;
  /** The role's part of the swarm's options, given the platform client (a checkpoint loader needs it). */
  readonly swarm: (platform: PlatformClient) => RoleSwarmOptions;
  /** Told of every pass refresh (for example to notice a new config version). */
  readonly onRefreshed?: (refreshed: JoinedExperiment) => void;
}

/** A node's metrics: where it records them, and, for a program that serves them, how. */
export interface NodeMetrics {
  readonly meters: SwarmMetrics;
  readonly serve?: () => Promise<MetricsServer>;
}

/** A node in the swarm; `close` leaves it. */
export interface NodeSession {
  /** This run of the program, in its progress records: the leaderboard credits each session on its own. */
  readonly id: string;
  readonly identity: Identity;
  readonly joined: JoinedExperiment;
  /** The experiment's authority, following its key rotations (pin, passes, requests, controls). */
  readonly authority: AuthorityKeys;
  /** Signed requests to the platform with the node's current pass. */
  readonly platform: PlatformClient;
  readonly swarm: Swarm;
  /** Where the metrics are served, when they are. */
  readonly metricsUrl: string | undefined;
  /** Aborted once the platform refused the node: it should finish what it is doing and leave. */
  readonly leaving: AbortSignal;
  /** The platform's refusal, once there is one. */
  readonly refused: JoinError | undefined;
  /** The platform refused the node (a pass refresh, the run control, a revocation): logs it once and leaves. */
  readonly refuse: (error: JoinError) => void;
  /** Follows the run control from the platform (every node also hears it from the swarm) until `signal`. */
  followRunControl(signal: AbortSignal): Promise<void>;
  /** Stops the swarm and the metrics server. */
  close(): Promise<void>;
}

/**
 * Opens the node's session in the swarm: authority, pass refresher, platform client, swarm (started),
 * metrics server. The node stays until `close`; a refusal by the platform aborts `leaving`.
 */
export async function openNodeSession(node: JoinedNode, options: NodeSessionOptions): Promise<NodeSession> {
  const { identity, joined } = node;
  const { log, server, credential, store } = node.options;
  const refusal = refusalLatch(log);
  const { refuse } = refusal;
  const meters = options.metrics?.meters ?? silentMetrics();
  let pass = joined.passToken;
  const authority = AuthorityKeys.fromJoin(joined, { pins: store.pins, logger: options.logger });
  const platform = new PlatformClient({
    server,
    experimentId: joined.experiment.id,
    keyPair: identity.keyPair,
    authority,
    pass: () => pass,
  });
  // Each run of the program is a session of its own, credited on its own on the leaderboard.
  const id = toBase64Url(crypto.getRandomValues(new Uint8Array(9)));
  const refresh = createPassRefresher({
    server,
    credential,
    keyPair: identity.keyPair,
    authority,
    onRefused: refuse,
    onJoined: (refreshed) => {
      meters.passExpiry.set(refreshed.passExpiresAt / 1000);
      options.onRefreshed?.(refreshed);
    },
  });
  const swarm = await Swarm.create({
    experimentId: joined.experiment.id,
    identity: identity.keyPair,
    authority,
    pass: joined.passToken,
    refreshPass: async () => {
      pass = await refresh();
      return pass;
    },
    mode: options.mode,
    ...(options.transports === undefined ? {} : { transports: options.transports }),
    ...(options.listen.length > 0 ? { listen: [...options.listen] } : {}),
    ...(options.announce !== undefined && options.announce.length > 0
      ? { announce: [...options.announce] }
      : {}),
    bootstrap: [...joined.initialPeers, ...options.peers],
    logger: options.logger,
    config: joined.config,
    session: id,
    metrics: meters,
    ...options.swarm(platform),
  });
  meters.passExpiry.set(joined.passExpiresAt / 1000);
  let metricsServer: MetricsServer | undefined;
  try {
    if (options.metrics?.serve !== undefined) {
      metricsServer = await options.metrics.serve();
      log("info", `metrics at ${metricsServer.url}`, { url: metricsServer.url });
    }
    await swarm.start();
  } catch (error) {
    await swarm.stop();
    await metricsServer?.close();
    throw error;
  }
  return {
    id,
    identity,
    joined,
    authority,
    platform,
    swarm,
    metricsUrl: metricsServer?.url,
    leaving: refusal.signal,
    get refused() {
      return refusal.error();
    },
    refuse,
    followRunControl: (signal) => followPlatformRunControl(platform, swarm, refuse, options.logger, signal),
    close: async () => {
      await swarm.stop();
      await metricsServer?.close();
    },
  };
}

/** The platform's first refusal of the node: logged once, and `signal` aborted so the node leaves. */
function refusalLatch(log: NodeLog): {
  refuse: (error: JoinError) => void;
  signal: AbortSignal;
  error: () => JoinError | undefined;
} {
  const leaving = new AbortController();
  let refused: JoinError | undefined;
  return {
    refuse: (error) => {
      if (refused !== undefined) return;
      refused = error;
      log("error", `the platform refused this node: ${error.message}`, { code: error.code });
      leaving.abort();
    },
    signal: leaving.signal,
    error: () => refused,
  };
}

/** Polls the platform's run control into the swarm's board until `signal`; a refusal goes to `refuse`. */
function followPlatformRunControl(
  platform: PlatformClient,
  swarm: Swarm,
  refuse: (error: JoinError) => void,
  logger: Logger,
  signal: AbortSignal,
): Promise<void> {
  return pollRunControl(
    {
      client: platform,
      offer: (control) => {
        swarm.control.offer(control, "platform");
      },
      onRefused: refuse,
      onError: (error) => {
        logger.debug({ err: error }, "could not read the run control");
      },
    },
    signal,
  );
}
