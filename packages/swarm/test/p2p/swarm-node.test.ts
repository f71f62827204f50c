import { webSockets } from "@libp2p/websockets";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { defineMethod } from "../../src/rpc/rpc.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { at } from "../support/at.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

const echo = defineMethod({
  name: "echo",
  request: z.strictObject({ text: z.string().max(100) }),
  response: z.strictObject({ text: z.string(), username: z.string() }),
  maxFrameBytes: 1 << 16,
});

const nodes: SwarmNode[] = [];
afterEach(async () => {
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

async function start(...args: Parameters<typeof startNode>): Promise<SwarmNode> {
  const node = await startNode(...args);
  nodes.push(node);
  return node;
}

describe("SwarmNode", () => {
  it("admits peers with valid passes, meshes from one bootstrap address, and serves signed RPCs", async () => {
    const authority = new TestAuthority();
    const first = await start(authority, { username: "alice" });
    const bootstrap = first.multiaddrs();
    const others = await Promise.all(
      [1, 2, 3].map((i) => start(authority, { username: `user${i}`, bootstrap })),
    );
    for (const node of [first, ...others]) {
      node.rpc.handle(echo, async (incoming) => {
        await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
      });
    }
    await eventually(
      () => others.every((node) => node.members().length === 3),
      "every node knows every other",
    );
    const answer = await at(others, 0).rpc.request(first.peerId, echo, { text: "hi" });
    expect(answer).toEqual({ text: "hi", username: "user1" });
    // Deadlines computed from measured rates are fractional milliseconds.
    const timed = await at(others, 0).rpc.request(first.peerId, echo, { text: "t" }, { timeoutMs: 5067.5 });
    expect(timed.text).toBe("t");
    const { stream, from } = await at(others, 1).rpc.call(at(others, 2).peerId, echo, { text: "x" });
    expect(from.pass.username).toBe("user3");
    await stream.closeWrite();
  });

  it("runs on the transports its runtime gives it: a WebSockets-only client meets a node at its WebSocket address", async () => {
    const authority = new TestAuthority();
    const member = await start(authority, { listen: ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/tcp/0/ws"] });
    // As in a browser: WebSockets (and the relay), no TCP.
    const tab = await start(authority, { mode: "client", transports: [webSockets()] });
    const tcp = member.multiaddrs().find((address) => !address.includes("/ws/"));
    const ws = member.multiaddrs().find((address) => address.includes("/ws/"));
    if (tcp === undefined || ws === undefined)
      throw new Error(`no TCP or WebSocket address: ${member.multiaddrs().join(" ")}`);
    await expect(tab.connect(tcp)).rejects.toThrow();
    expect(await tab.connect(ws)).toBe(member.peerId);
    await eventually(() => member.members().includes(tab.peerId), "the node counts the client a member");
    expect(tab.modeOf(member.peerId)).toBe("node");
  });

  it("refuses and disconnects a peer whose pass is from another authority", async () => {
    const authority = new TestAuthority();
    const member = await start(authority);
    const stranger = await start(new TestAuthority(authority.experimentId));
    await expect(stranger.connect(at(member.multiaddrs(), 0))).rejects.toMatchObject({
      code: "UNAUTHORIZED_PEER",
    });
    await eventually(() => member.authorizer.isDenied(stranger.peerId), "the member denies the stranger");
    expect(member.members()).not.toContain(stranger.peerId);
    await eventually(() => member.libp2p.getConnections().length === 0, "the stranger is disconnected");
  });
});

describe("SwarmNode against hostile peers", () => {
  async function bareNode() {
    const { createLibp2p } = await import("libp2p");
    const { tcp } = await import("@libp2p/tcp");
    const { noise } = await import("@chainsafe/libp2p-noise");
    const { yamux } = await import("@chainsafe/libp2p-yamux");
    const bare = await createLibp2p({
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
    });
    hostile.push(bare);
    return bare;
  }
  const hostile: Array<{ stop(): void | Promise<void> }> = [];
  afterEach(async () => {
    await Promise.all(hostile.splice(0).map(async (node) => node.stop()));
  });

  it("aborts a stranger's gossipsub stream and drops the stranger when it shows no pass", async () => {
    const authority = new TestAuthority();
    const member = await start(authority, { helloTimeoutMs: 2_000 });
    const bare = await bareNode();
    const { multiaddr } = await import("@multiformats/multiaddr");
    const stream = await bare.dialProtocol(multiaddr(member.multiaddrs()[0]), "/meshsub/1.1.0");
    const closed = new Promise<unknown>((resolve) => {
      stream.addEventListener(
        "close",
        (event) => {
          resolve(event);
        },
        { once: true },
      );
    });
    stream.send(new Uint8Array([1, 2, 3]));
    await closed;
    await eventually(
      () => member.authorizer.isDenied(bare.peerId.toString()),
      "the member denies the silent stranger",
    );
    await eventually(() => member.libp2p.getConnections().length === 0, "the stranger is disconnected");
  });

  it("refuses a replayed request, garbage and a forged sender with typed errors, and keeps serving", async () => {
    const { signRequest, ed25519PublicKeyFromPeerId } = await import("@barnraise/protocol");
    const { nodeCrypto } = await import("@barnraise/protocol/node");
    const { encodeMessage, decodeMessage } = await import("../../src/rpc/codec.ts");
    const { Libp2pFrameStream } = await import("../../src/rpc/frame-stream.ts");
    const authority = new TestAuthority();
    const server = await start(authority);
    server.rpc.handle(echo, async (incoming) => {
      await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
    });
    const { generateKeyPair } = await import("@barnraise/protocol");
    const identity = generateKeyPair();
    const client = await start(authority, { identity, username: "mallory" });
    await client.connect(at(server.multiaddrs(), 0));
    const protocol = `/barnraise/${authority.experimentId}/echo/1.0.0`;
    const errorSchema = z.object({ error: z.object({ code: z.string() }) });

    /** Sends one frame on a fresh stream (after `delayMs`, or built then) and returns the answer's error code or "ok". */
    async function rawExchange(
      frame: Uint8Array | (() => Uint8Array),
      { scope = protocol, delayMs = 0 } = {},
    ): Promise<string> {
      const raw = await client.libp2p.dialProtocol(server.libp2p.peerId, scope);
      const stream = new Libp2pFrameStream(raw, 1 << 20);
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      // A server that gave up may have closed its side already; its answer still says why.
      await stream.write(typeof frame === "function" ? frame() : frame).catch(() => undefined);
      const answer = await stream.read();
      await stream.closeWrite();
      if (answer === null) throw new Error("the server closed the stream without answering");
      const decoded = decodeMessage(
        answer,
        z.union([errorSchema, z.object({ token: z.string(), head: z.instanceof(Uint8Array) })]),
        "answer",
      );
      return "error" in decoded ? decoded.error.code : "ok";
    }

    const head = encodeMessage({ text: "once" });
    const token = signRequest(nodeCrypto, identity, {
      pass: client.passHolder.token(),
      recipientPublicKey: ed25519PublicKeyFromPeerId(server.peerId),
      scope: protocol,
      body: head,
      time: Date.now(),
    });
    const envelope = encodeMessage({ token, head });
    expect(await rawExchange(envelope)).toBe("ok");
    expect(await rawExchange(envelope)).toBe("REQUEST_REPLAYED");
    expect(await rawExchange(new Uint8Array([0xff, 0x00, 0x13]))).toBe("MALFORMED_MESSAGE");
    expect(await rawExchange(encodeMessage({ token, head: encodeMessage({ text: "tampered" }) }))).toBe(
      "BODY_MISMATCH",
    );
    // A request signed by someone else's key but sent over mallory's connection.
    const other = generateKeyPair();
    const forged = signRequest(nodeCrypto, other, {
      pass: authority.pass(other),
      recipientPublicKey: ed25519PublicKeyFromPeerId(server.peerId),
      scope: protocol,
      body: head,
      time: Date.now(),
    });
    expect(await rawExchange(encodeMessage({ token: forged, head }))).toBe("REQUEST_WRONG_SENDER");
    const expired = signRequest(nodeCrypto, identity, {
      pass: authority.pass(identity, { issuedAt: Date.now() - 7_200_000, lifetimeMs: 3_600_000 }),
      recipientPublicKey: ed25519PublicKeyFromPeerId(server.peerId),
      scope: protocol,
      body: head,
      time: Date.now(),
    });
    expect(await rawExchange(encodeMessage({ token: expired, head }))).toBe("PASS_EXPIRED");
    // A stream that brings no request in time is answered with TIMEOUT, after the method's own
    // deadline: a request that arrives within it is served.
    const patient = { ...echo, name: "patient", requestTimeoutMs: 1_500 };
    const hasty = { ...echo, name: "hasty", requestTimeoutMs: 200 };
    for (const method of [patient, hasty]) {
      server.rpc.handle(method, async (incoming) => {
        await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
      });
    }
    const late = (name: string): Promise<string> => {
      const scope = `/barnraise/${authority.experimentId}/${name}/1.0.0`;
      const signedLate = () => {
        const body = encodeMessage({ text: "late" });
        const signed = signRequest(nodeCrypto, identity, {
          pass: client.passHolder.token(),
          recipientPublicKey: ed25519PublicKeyFromPeerId(server.peerId),
          scope,
          body,
          time: Date.now(),
        });
        return encodeMessage({ token: signed, head: body });
      };
      return rawExchange(signedLate, { scope, delayMs: 600 });
    };
    expect(await late("patient")).toBe("ok");
    expect(await late("hasty")).toBe("TIMEOUT");
    // Still serving honest requests.
    await expect(client.rpc.request(server.peerId, echo, { text: "after" })).resolves.toEqual({
      text: "after",
      username: "mallory",
    });
  });
});
