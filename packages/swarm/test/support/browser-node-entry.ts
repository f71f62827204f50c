import { webSockets } from "@libp2p/websockets";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { echoMethod } from "./echo-method.ts";
import { createTabNode, type BrowserNodeInit } from "./tab-node.ts";

export type { BrowserNodeInit } from "./tab-node.ts";

/**
 * A swarm node in a web page, for the browser tests: bundled for the browser with esbuild and
 * driven through `globalThis.browserNode`. It runs on WebSockets alone, in client mode, as a
 * volunteer's tab does.
 */

let node: SwarmNode | undefined;

const browserNode = {
  async start(init: BrowserNodeInit): Promise<string> {
    node = await createTabNode(init, [webSockets()]);
    await node.start();
    return node.peerId;
  },
  members(): string[] {
    return node?.members() ?? [];
  },
  modeOf(peer: string): string | undefined {
    return node?.modeOf(peer);
  },
  async echo(peer: string, text: string): Promise<{ text: string; username: string }> {
    if (node === undefined) throw new Error("not started");
    return node.rpc.request(peer, echoMethod, { text });
  },
  async stop(): Promise<void> {
    await node?.stop();
  },
};

export type BrowserNode = typeof browserNode;

(globalThis as { browserNode?: BrowserNode }).browserNode = browserNode;
