import { generateKeyPair, toBase64Url, type KeyPair } from "@barnraise/protocol";
import { BrowserLab } from "@barnraise/browserlab";
import type { JSHandle } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import type { BrowserNode, BrowserNodeInit } from "../support/browser-node-entry.ts";
import { echoMethod } from "../support/echo-method.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * The engine in a real Chromium: a swarm node bundled for the browser (no Node.js, WebSockets and
 * no TCP, client mode) joins a Node.js node at its WebSocket address. Passes are checked both ways
 * as between two Node.js nodes, and signed RPCs run in both directions (@barnraise/browserlab).
 */

const ENTRY = new URL("../support/browser-node-entry.ts", import.meta.url).pathname;

let lab: BrowserLab;
const nodes: SwarmNode[] = [];

beforeAll(async () => {
  lab = await BrowserLab.start();
}, 60_000);

afterEach(async () => {
  await lab.closePages();
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

afterAll(async () => {
  await lab.stop();
});

/** A page running the bundled node, started with `init`; returns the node's handle and its PeerId. */
async function openTab(init: BrowserNodeInit): Promise<{ tab: JSHandle<BrowserNode>; peerId: string }> {
  const { handle, errors } = await lab.open<BrowserNode>(ENTRY, "browserNode");
  const peerId = await handle.evaluate((node, tabInit) => node.start(tabInit), init);
  expect(errors).toEqual([]);
  return { tab: handle, peerId };
}

function tabInit(
  authority: TestAuthority,
  identity: KeyPair,
  pass: string,
  bootstrap: string,
): BrowserNodeInit {
  return {
    experimentId: authority.experimentId,
    authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
    publicKey: toBase64Url(identity.publicKey),
    secretKey: toBase64Url(identity.secretKey),
    pass,
    bootstrap,
  };
}

async function startMember(authority: TestAuthority): Promise<{ member: SwarmNode; ws: string }> {
  const member = await startNode(authority, {
    username: "native",
    listen: ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/tcp/0/ws"],
  });
  nodes.push(member);
  member.rpc.handle(echoMethod, async (incoming) => {
    await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
  });
  const ws = member.multiaddrs().find((address) => address.includes("/ws/"));
  if (ws === undefined) throw new Error(`no WebSocket address: ${member.multiaddrs().join(" ")}`);
  return { member, ws };
}

describe("a swarm node in Chromium", () => {
  it("joins a Node.js node over WebSockets: both admit each other by pass and call each other", async () => {
    const authority = new TestAuthority();
    const { member, ws } = await startMember(authority);
    const identity = generateKeyPair();
    const { tab, peerId } = await openTab(
      tabInit(authority, identity, authority.pass(identity, { username: "tab" }), ws),
    );

    await eventually(() => member.members().includes(peerId), "the Node.js node admits the tab");
    expect(member.modeOf(peerId)).toBe("client");
    expect(await tab.evaluate((node) => node.members())).toEqual([member.peerId]);
    expect(await tab.evaluate((node, peer) => node.modeOf(peer), member.peerId)).toBe("node");
    // Signed both ways: each side answers with the username of the caller's pass.
    expect(await tab.evaluate((node, peer) => node.echo(peer, "from the tab"), member.peerId)).toEqual({
      text: "from the tab",
      username: "tab",
    });
    expect(await member.rpc.request(peerId, echoMethod, { text: "to the tab" })).toEqual({
      text: "to the tab",
      username: "native",
    });
  }, 60_000);

  it("is refused with a pass of another authority, as any node is", async () => {
    const authority = new TestAuthority();
    const { member, ws } = await startMember(authority);
    const stranger = new TestAuthority(authority.experimentId);
    const identity = generateKeyPair();
    const { tab, peerId } = await openTab(tabInit(stranger, identity, stranger.pass(identity), ws));

    await eventually(() => member.authorizer.isDenied(peerId), "the Node.js node denies the tab");
    expect(member.members()).toEqual([]);
    expect(await tab.evaluate((node) => node.members())).toEqual([]);
  }, 60_000);
});
