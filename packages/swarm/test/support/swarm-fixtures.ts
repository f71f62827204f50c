import {
  generateKeyPair,
  issueAccessPass,
  signRunControl,
  type KeyPair,
  type PeerRole,
  type RunControlInit,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { pino } from "pino";
import { SwarmNode, type SwarmNodeOptions } from "../../src/p2p/swarm-node.ts";

export const silentLogger = pino(
  { level: process.env.SWARM_TEST_LOG ?? "silent" },
  pino.destination({ fd: 2, sync: true }),
);

/** A stand-in for the platform: one experiment's authority key, issuing passes the way join does. */
/** The grant (token id) a test pass of `publicKey` is issued on unless told otherwise: one per identity. */
export function testGrantOf(publicKey: Uint8Array): string {
  return `token-${Buffer.from(publicKey.subarray(0, 12)).toString("base64url")}`;
}

export class TestAuthority {
  readonly experimentId: string;
  readonly keyPair: KeyPair;

  /** `keyPair` lets another thread issue passes of the same authority. */
  constructor(experimentId = "exp-test", keyPair: KeyPair = generateKeyPair()) {
    this.experimentId = experimentId;
    this.keyPair = keyPair;
  }

  pass(
    identity: KeyPair,
    init: {
      username?: string;
      role?: PeerRole;
      lifetimeMs?: number;
      issuedAt?: number;
      /** The token the pass is issued on; default one per identity (`testGrantOf`). */
      grant?: string;
    } = {},
  ): string {
    const issuedAt = init.issuedAt ?? Date.now() - 1_000;
    const username = init.username ?? "volunteer";
    return issueAccessPass(nodeCrypto, this.keyPair, {
      experimentId: this.experimentId,
      username,
      role: init.role ?? "trainer",
      peerPublicKey: identity.publicKey,
      grant: init.grant ?? testGrantOf(identity.publicKey),
      issuedAt,
      expiresAt: issuedAt + (init.lifetimeMs ?? 3_600_000),
    });
  }

  /** A run control token of this experiment: version 1, running, nobody revoked, unless `init` says otherwise. */
  runControl(init: Partial<RunControlInit> = {}): string {
    return signRunControl(nodeCrypto, this.keyPair, {
      experimentId: this.experimentId,
      version: 1,
      issuedAt: Date.now(),
      status: "running",
      generation: 0,
      rollback: null,
      revokedUsernames: [],
      revokedGrants: [],
      ...init,
    });
  }
}

export type TestNodeOptions = Partial<Omit<SwarmNodeOptions, "identity" | "pass">> & {
  identity?: KeyPair;
  username?: string;
  role?: PeerRole;
  pass?: string;
};

/** A started node on 127.0.0.1 with a pass from `authority` (or the one given). */
export async function startNode(authority: TestAuthority, options: TestNodeOptions = {}): Promise<SwarmNode> {
  const identity = options.identity ?? generateKeyPair();
  const role = options.role ?? (options.mode === "aux" ? "aux" : "trainer");
  const passInit = { username: options.username ?? `user-${identity.publicKey[0]}`, role };
  const node = await SwarmNode.create({
    experimentId: options.experimentId ?? authority.experimentId,
    identity,
    authorityPublicKey: options.authorityPublicKey ?? authority.keyPair.publicKey,
    pass: options.pass ?? authority.pass(identity, passInit),
    refreshPass: options.refreshPass ?? (() => Promise.resolve(authority.pass(identity, passInit))),
    mode: options.mode ?? "node",
    listen: options.listen ?? (options.mode === "client" ? [] : ["/ip4/127.0.0.1/tcp/0"]),
    bootstrap: options.bootstrap ?? [],
    logger: options.logger ?? silentLogger,
    helloTimeoutMs: options.helloTimeoutMs ?? 10_000,
    ...(options.now === undefined ? {} : { now: options.now }),
    ...(options.maxPeers === undefined ? {} : { maxPeers: options.maxPeers }),
  });
  await node.start();
  return node;
}

/** Polls `condition` every 25 ms until it holds, failing after `timeoutMs` with `what`. */
export async function eventually(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
