import {
  generateKeyPair,
  issueAccessPass,
  signAuthorityRotation,
  signRunControl,
  type KeyPair,
  type PeerRole,
  type RunControlInit,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { pino } from "pino";
import { SwarmNode, type SwarmNodeOptions } from "../../src/p2p/swarm-node.ts";
import { AuthorityKeys, type AuthorityKeysOptions } from "../../src/platform/authority-keys.ts";

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
  /** The current key pair; `rotate` replaces it. */
  keyPair: KeyPair;
  /** The rotation certificates issued so far, oldest first, as the platform lists them. */
  readonly certificates: string[] = [];
  #keyVersion = 1;

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
      /** Another key than the current one (a key that was rotated away, a forger's). */
      signer?: KeyPair;
    } = {},
  ): string {
    const issuedAt = init.issuedAt ?? Date.now() - 1_000;
    const username = init.username ?? "volunteer";
    return issueAccessPass(nodeCrypto, init.signer ?? this.keyPair, {
      experimentId: this.experimentId,
      username,
      role: init.role ?? "trainer",
      peerPublicKey: identity.publicKey,
      grant: init.grant ?? testGrantOf(identity.publicKey),
      issuedAt,
      expiresAt: issuedAt + (init.lifetimeMs ?? 3_600_000),
    });
  }

  /** A holder of this authority's current key, as a node builds one from its join. */
  keys(options: Partial<Omit<AuthorityKeysOptions, "experimentId" | "publicKey">> = {}): AuthorityKeys {
    return new AuthorityKeys({
      ...options,
      experimentId: this.experimentId,
      publicKey: this.keyPair.publicKey,
    });
  }

  /**
   * Replaces the key as the platform does when the organizer rotates it: the old key signs a
   * certificate naming a new one (listed in `certificates`). Returns the key replaced.
   */
  rotate(rotatedAt: number = Date.now()): { previous: KeyPair; certificate: string; rotatedAt: number } {
    const previous = this.keyPair;
    const next = generateKeyPair();
    this.#keyVersion += 1;
    const certificate = signAuthorityRotation(nodeCrypto, previous, {
      experimentId: this.experimentId,
      keyVersion: this.#keyVersion,
      publicKey: next.publicKey,
      rotatedAt,
    });
    this.keyPair = next;
    this.certificates.push(certificate);
    return { previous, certificate, rotatedAt };
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
    authority: options.authority ?? authority.keys(),
    pass: options.pass ?? authority.pass(identity, passInit),
    refreshPass: options.refreshPass ?? (() => Promise.resolve(authority.pass(identity, passInit))),
    mode: options.mode ?? "node",
    listen: options.listen ?? (options.mode === "client" ? [] : ["/ip4/127.0.0.1/tcp/0"]),
    bootstrap: options.bootstrap ?? [],
    logger: options.logger ?? silentLogger,
    helloTimeoutMs: options.helloTimeoutMs ?? 10_000,
    ...(options.now === undefined ? {} : { now: options.now }),
    ...(options.maxPeers === undefined ? {} : { maxPeers: options.maxPeers }),
    ...(options.transports === undefined ? {} : { transports: options.transports }),
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
