import {
  canonicalJson,
  fromBase64Url,
  generateKeyPair,
  signAuthorityRotation,
  signRunControl,
  toBase64Url,
  verifyAuthorityRotation,
  type KeyPair,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { RunControlBoard } from "../../src/control/run-control-board.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { pollRunControl } from "../../src/platform/control-poller.ts";
import { PlatformClient } from "../../src/platform/platform-client.ts";
import { defineMethod } from "../../src/rpc/rpc.ts";
import { at } from "../support/at.ts";
import { eventually, silentLogger, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * The organizer rotates the authority key mid-run (real libp2p nodes on loopback): running nodes
 * learn the certificate from their run control poll (faked here, through the platform client's
 * injected fetch), trust the new key, fetch new passes and keep accepting each other; a newcomer
 * with only a pass of the new key is accepted by all, even after it was refused by nodes that had
 * not heard of the rotation yet; a pass the old key signed after the rotation is refused; a forged
 * certificate is refused and changes nothing.
 */

const POLL_MS = 250;

const echo = defineMethod({
  name: "echo",
  request: z.strictObject({ text: z.string().max(100) }),
  response: z.strictObject({ text: z.string() }),
  maxFrameBytes: 0,
});

/** What the fake platform's GET /control answers now, and the recipients of the requests it got. */
interface FakeControlRoute {
  control: string;
  certificates: string[];
  /** Per node (its public key, base64url), the recipient key of each signed request it sent. */
  readonly recipients: Map<string, string[]>;
}

/** A fetch that answers GET /control with `route`, noting whom each signed request was addressed to. */
function fakeControlFetch(route: FakeControlRoute): typeof fetch {
  return (_input, init) => {
    const authorization = new Headers(init?.headers).get("authorization") ?? "";
    const payload = authorization.replace(/^Barnraise /, "").split(".")[0] ?? "";
    const signed = JSON.parse(new TextDecoder().decode(fromBase64Url(payload, "request"))) as {
      pass: string;
      recipient: string;
    };
    const holder = (
      JSON.parse(new TextDecoder().decode(fromBase64Url(signed.pass.split(".")[0] ?? "", "pass"))) as {
        peerPublicKey: string;
      }
    ).peerPublicKey;
    route.recipients.set(holder, [...(route.recipients.get(holder) ?? []), signed.recipient]);
    const body = JSON.stringify({ control: route.control, authorityRotations: route.certificates });
    return Promise.resolve(
      new Response(body, { status: 200, headers: { "content-type": "application/json" } }),
    );
  };
}

interface Member {
  readonly node: SwarmNode;
  readonly board: RunControlBoard;
  readonly identity: KeyPair;
  /** How many times it fetched a pass. */
  readonly refreshes: { count: number };
}

const stops: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/**
 * A node of `authority` that polls `route` for the run control every POLL_MS, as run-peer wires it:
 * one AuthorityKeys holder shared by the node, its board and its platform client.
 */
async function member(
  authority: TestAuthority,
  route: FakeControlRoute,
  options: {
    username: string;
    bootstrap?: string[];
    keys?: AuthorityKeys;
    pass?: string;
    identity?: KeyPair;
  },
): Promise<Member> {
  const identity = options.identity ?? generateKeyPair();
  const keys = options.keys ?? authority.keys({ logger: silentLogger });
  const refreshes = { count: 0 };
  const node = await startNode(authority, {
    identity,
    username: options.username,
    authority: keys,
    bootstrap: options.bootstrap ?? [],
    // Peers that show no valid pass are gated soon, so the test sees the gate lifted.
    helloTimeoutMs: 2_000,
    ...(options.pass === undefined ? {} : { pass: options.pass }),
    // The platform's join: a pass signed by whatever key the authority has now.
    refreshPass: () => {
      refreshes.count += 1;
      return Promise.resolve(authority.pass(identity, { username: options.username }));
    },
  });
  stops.push(() => node.stop());
  node.rpc.handle(echo, async (incoming) => {
    await incoming.respond({ text: incoming.head.text });
  });
  const board = new RunControlBoard({
    rpc: node.rpc,
    experimentId: authority.experimentId,
    authority: keys,
    peers: () => node.members(),
    applyRevocations: (revoked) => {
      node.applyRevocations(revoked);
    },
    logger: silentLogger,
  });
  board.start();
  stops.push(() => {
    board.stop();
  });
  const client = new PlatformClient({
    server: new URL("http://platform.invalid/"),
    experimentId: authority.experimentId,
    keyPair: identity,
    authority: keys,
    pass: () => node.passHolder.token(),
    fetch: fakeControlFetch(route),
  });
  const polling = new AbortController();
  const poll = pollRunControl(
    {
      client,
      offer: (token) => {
        board.offer(token, "platform");
      },
      onRefused: () => undefined,
      intervalMs: POLL_MS,
    },
    polling.signal,
  );
  stops.push(async () => {
    polling.abort();
    await poll;
  });
  return { node, board, identity, refreshes };
}

const keyOf = (key: Uint8Array) => toBase64Url(key);

describe("a rotation of the authority key mid-run (real libp2p on loopback)", () => {
  it("running nodes follow it from their control poll and keep accepting each other; a newcomer with a new-key pass is accepted by all", async () => {
    const authority = new TestAuthority("exp-rotation");
    const route: FakeControlRoute = {
      control: authority.runControl(),
      certificates: [],
      recipients: new Map(),
    };
    const alice = await member(authority, route, { username: "alice" });
    const bootstrap = alice.node.multiaddrs();
    const bob = await member(authority, route, { username: "bob", bootstrap });
    const carol = await member(authority, route, { username: "carol", bootstrap });
    const running = [alice, bob, carol];
    await eventually(
      () => running.every((m) => m.node.members().length === 2 && m.board.current()?.version === 1),
      "three nodes meshed, holding the first control",
      30_000,
    );

    // The organizer rotates. A newcomer joins at once with a pass of the new key, before the
    // running nodes' next poll: they refuse its pass, not knowing the key yet.
    const { previous, rotatedAt } = authority.rotate();
    const newKey = authority.keyPair.publicKey;
    const dave = await member(authority, route, {
      username: "dave",
      bootstrap,
      keys: AuthorityKeys.fromJoin({
        experiment: { id: authority.experimentId, name: "rotation" },
        authorityPublicKey: newKey,
        authorityRotations: authority.certificates.map((token) =>
          verifyAuthorityRotation(nodeCrypto, token, { experimentId: authority.experimentId }),
        ),
      }),
    });
    await eventually(
      () => alice.node.authorizer.isDenied(dave.node.peerId),
      "alice refused the newcomer's pass of a key she does not know yet, and gated it",
    );
    expect(alice.node.members()).not.toContain(dave.node.peerId);
    // A pass of an unknown key says nothing of the newcomer's standing: nothing to report.
    expect(alice.node.refusedPeers.of(dave.node.peerId)).toBeUndefined();

    // The platform now answers with the certificate and a control signed by the new key.
    route.control = authority.runControl({ version: 2 });
    route.certificates = [...authority.certificates];
    const published = Date.now();
    const everyone = [...running, dave];
    await eventually(
      () =>
        running.every(
          (m) =>
            keyOf(m.node.authority.publicKey) === keyOf(newKey) &&
            m.board.current()?.version === 2 &&
            m.node.passes.signedByCurrentKey(m.node.passHolder.token()),
        ),
      "every running node follows the new key, holds the new control and a pass of the new key",
      10_000,
    );
    await eventually(
      () => everyone.every((m) => m.node.members().length === 3),
      "all four meshed, the newcomer included",
      20_000,
    );
    // Well within the 60 s the issue allows (polls here come every 250 ms, 5 s in the programs).
    expect(Date.now() - published).toBeLessThan(20_000);
    for (const m of running) expect(m.refreshes.count).toBeGreaterThanOrEqual(1);

    // Every pair still talks, each side showing a pass of the new key.
    for (const from of everyone) {
      for (const to of everyone) {
        if (from === to) continue;
        await expect(from.node.rpc.request(to.node.peerId, echo, { text: "hi" })).resolves.toEqual({
          text: "hi",
        });
      }
    }
    // Requests to the platform are addressed to the new key.
    await new Promise((resolve) => setTimeout(resolve, 2 * POLL_MS));
    for (const m of everyone) {
      expect(route.recipients.get(keyOf(m.identity.publicKey))?.at(-1)).toBe(keyOf(newKey));
    }

    // A pass the old key signed after the rotation is refused, though the old key is in its grace.
    const eveIdentity = generateKeyPair();
    const late = authority.pass(eveIdentity, { username: "eve", issuedAt: rotatedAt + 1, signer: previous });
    const eve = await startNode(authority, {
      identity: eveIdentity,
      username: "eve",
      pass: late,
      refreshPass: () => Promise.resolve(late),
      authority: new AuthorityKeys({ experimentId: authority.experimentId, publicKey: previous.publicKey }),
    });
    stops.push(() => eve.stop());
    await expect(eve.connect(at(alice.node.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    expect(alice.node.refusedPeers.of(eve.peerId)?.code).toBe("PASS_KEY_ROTATED");
    expect(alice.node.members()).not.toContain(eve.peerId);
  }, 90_000);

  it("a forged certificate is refused and changes nothing", async () => {
    const authority = new TestAuthority("exp-forged");
    const route: FakeControlRoute = {
      control: authority.runControl(),
      certificates: [],
      recipients: new Map(),
    };
    const alice = await member(authority, route, { username: "alice" });
    const bob = await member(authority, route, { username: "bob", bootstrap: alice.node.multiaddrs() });
    const both = [alice, bob];
    await eventually(
      () => both.every((m) => m.node.members().length === 1 && m.board.current()?.version === 1),
      "two nodes meshed, holding the first control",
      30_000,
    );
    const key = authority.keyPair.publicKey;
    const refreshesBefore = both.map((m) => m.refreshes.count);

    // Mallory, on the path to the platform, signs "the key is now mine" with her own key and names
    // the real key as the signer, with a control signed by her key.
    const mallory = generateKeyPair();
    const signed = signAuthorityRotation(nodeCrypto, mallory, {
      experimentId: authority.experimentId,
      keyVersion: 2,
      publicKey: generateKeyPair().publicKey,
      rotatedAt: Date.now(),
    });
    const [payload = "", signature = ""] = signed.split(".");
    const fields = JSON.parse(new TextDecoder().decode(fromBase64Url(payload, "payload"))) as Record<
      string,
      unknown
    >;
    fields["previousPublicKey"] = toBase64Url(key);
    route.certificates = [`${toBase64Url(canonicalJson(fields))}.${signature}`];
    route.control = signRunControl(nodeCrypto, mallory, {
      experimentId: authority.experimentId,
      version: 9,
      issuedAt: Date.now(),
      status: "paused",
      generation: 0,
      rollback: null,
      revokedUsernames: ["alice", "bob"],
      revokedGrants: [],
    });
    const polled = both.map((m) => route.recipients.get(keyOf(m.identity.publicKey))?.length ?? 0);
    await eventually(
      () =>
        both.every(
          (m, i) => (route.recipients.get(keyOf(m.identity.publicKey))?.length ?? 0) >= (polled[i] ?? 0) + 3,
        ),
      "both nodes polled the forged answer a few times",
    );
    for (const m of both) {
      expect(keyOf(m.node.authority.publicKey)).toBe(keyOf(key));
      expect(m.board.current()?.version).toBe(1);
      expect(m.node.members()).toHaveLength(1);
    }
    expect(both.map((m) => m.refreshes.count)).toEqual(refreshesBefore);
    await expect(alice.node.rpc.request(bob.node.peerId, echo, { text: "still" })).resolves.toEqual({
      text: "still",
    });
    // A node with a pass of mallory's key is refused.
    const identity = generateKeyPair();
    const forgedPass = authority.pass(identity, { username: "mallory", signer: mallory });
    const impostor = await startNode(authority, {
      identity,
      pass: forgedPass,
      refreshPass: () => Promise.resolve(forgedPass),
      authority: new AuthorityKeys({ experimentId: authority.experimentId, publicKey: mallory.publicKey }),
    });
    stops.push(() => impostor.stop());
    await expect(impostor.connect(at(alice.node.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    await eventually(
      () => alice.node.authorizer.isDenied(impostor.peerId),
      "alice gated the node with a pass of a key she does not trust",
    );
    expect(alice.node.members()).not.toContain(impostor.peerId);
    expect(alice.node.refusedPeers.of(impostor.peerId)).toBeUndefined();
  }, 60_000);
});
