import { rm } from "node:fs/promises";
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { BrowserLab } from "@barnraise/browserlab";
import type { JSHandle } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { loadNodeTransports } from "../../src/node/node-transports.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { download, echoMethod, serveDownloads } from "../support/echo-method.ts";
import { bundleWorkerNode } from "../support/worker-node-bundle.ts";
import type { WorkerNodePage } from "../support/worker-page-entry.ts";
import { eventually, startNode, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * WebRTC for a node in a Web Worker, as a volunteer's tab runs it (browsers give workers no
 * `RTCPeerConnection`): the page holds the peer connection and passes calls, events and bytes
 * along, and the worker's node reaches a Node.js node at its WebRTC-direct address, without
 * WebSockets or a relay.
 */

const PAGE = new URL("../support/worker-page-entry.ts", import.meta.url).pathname;

let lab: BrowserLab;
let built: string;
const nodes: SwarmNode[] = [];

beforeAll(async () => {
  const bundle = await bundleWorkerNode();
  built = bundle.directory;
  lab = await BrowserLab.start({ files: [bundle.file] });
}, 120_000);

afterEach(async () => {
  await lab.closePages();
  await Promise.all(nodes.splice(0).map((node) => node.stop()));
});

afterAll(async () => {
  await lab.stop();
  await rm(built, { recursive: true, force: true });
});

function call<T>(page: JSHandle<WorkerNodePage>, method: string, ...args: unknown[]): Promise<T> {
  return page.evaluate((node, [name, rest]) => node.call(name, ...rest), [
    method,
    args,
  ] as const) as Promise<T>;
}

describe("a swarm node in a Web Worker", () => {
  it("reaches a Node.js node over WebRTC-direct through its page, and both call each other with their passes", async () => {
    const authority = new TestAuthority();
    // As a CLI peer listens by default: TCP for nodes, WebRTC-direct for browsers. No WebSockets.
    const networking = await loadNodeTransports();
    expect(networking.withoutWebRtc).toBeUndefined();
    const member = await startNode(authority, {
      username: "native",
      transports: networking.transports,
      listen: ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/webrtc-direct"],
    });
    nodes.push(member);
    member.rpc.handle(echoMethod, async (incoming) => {
      await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
    });
    serveDownloads(member.rpc);
    const direct = member.multiaddrs().find((address) => address.includes("/webrtc-direct/"));
    expect(direct, member.multiaddrs().join(" ")).toBeDefined();

    const identity = generateKeyPair();
    const { handle, errors } = await lab.open<WorkerNodePage>(PAGE, "workerNode");
    const started = await call<{ peerId: string; installed: boolean }>(handle, "start", {
      experimentId: authority.experimentId,
      authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
      publicKey: toBase64Url(identity.publicKey),
      secretKey: toBase64Url(identity.secretKey),
      pass: authority.pass(identity, { username: "tab" }),
      bootstrap: direct,
    });
    // The worker had no WebRTC of its own: the stand-ins were installed.
    expect(started.installed).toBe(true);
    const { peerId } = started;

    await eventually(() => member.members().includes(peerId), "the Node.js node admits the worker's node");
    expect(member.modeOf(peerId)).toBe("client");
    const addresses = await call<string[]>(handle, "connections", member.peerId);
    expect(addresses.length).toBeGreaterThan(0);
    for (const address of addresses) expect(address).toContain("/webrtc-direct/");
    expect(await call(handle, "echo", member.peerId, "from the worker")).toEqual({
      text: "from the worker",
      username: "tab",
    });
    expect(await member.rpc.request(peerId, echoMethod, { text: "to the worker" })).toEqual({
      text: "to the worker",
      username: "native",
    });
    // Bulk bytes both ways, far past the data channels' buffering: 8 MiB each, every byte intact.
    const bulk = 8 << 20;
    expect(await call(handle, "download", member.peerId, bulk)).toEqual({ bytes: bulk, intact: true });
    expect(await download(member.rpc, peerId, bulk)).toEqual({ bytes: bulk, intact: true });
    await call(handle, "stop");
    expect(errors).toEqual([]);
  }, 90_000);
});
