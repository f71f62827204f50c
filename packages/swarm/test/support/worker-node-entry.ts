import { browserTransports } from "../../src/browser/browser-transports.ts";
import { installWorkerRtc } from "../../src/browser/rtc-bridge/worker-rtc.ts";
import type { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { download, echoMethod, serveDownloads } from "./echo-method.ts";
import { createTabNode, type BrowserNodeInit } from "./tab-node.ts";

/**
 * A swarm node in a dedicated Web Worker, as a volunteer's tab runs it, for the browser tests: its
 * page (`worker-page-entry.ts`) hosts WebRTC for it, and the worker has the transports a tab has
 * (`browserTransports`). Driven by `{ call, method, args }` messages, answered with `{ call, value }`
 * or `{ call, error }`.
 */

const installed = installWorkerRtc();
let node: SwarmNode | undefined;

const methods = {
  async start(init: BrowserNodeInit): Promise<{ peerId: string; installed: boolean }> {
    node = await createTabNode(init, browserTransports());
    serveDownloads(node.rpc);
    await node.start();
    return { peerId: node.peerId, installed };
  },
  members(): string[] {
    return node?.members() ?? [];
  },
  /** The address of each connection to `peer`, as this node holds them. */
  connections(peer: string): string[] {
    return (
      node?.libp2p
        .getConnections()
        .filter((c) => c.remotePeer.toString() === peer)
        .map((c) => c.remoteAddr.toString()) ?? []
    );
  },
  async echo(peer: string, text: string): Promise<{ text: string; username: string }> {
    if (node === undefined) throw new Error("not started");
    return node.rpc.request(peer, echoMethod, { text });
  },
  download(peer: string, bytes: number): Promise<{ bytes: number; intact: boolean }> {
    if (node === undefined) throw new Error("not started");
    return download(node.rpc, peer, bytes);
  },
  async stop(): Promise<void> {
    await node?.stop();
  },
};

export type WorkerNodeMethods = typeof methods;

const scope = globalThis as unknown as {
  addEventListener(type: "message", listener: (event: MessageEvent) => void): void;
  postMessage(message: unknown): void;
};
scope.addEventListener(
  "message",
  ({ data }: MessageEvent<{ call?: number; method?: string; args?: unknown[] }>) => {
    if (typeof data.call !== "number" || data.method === undefined) return;
    const { call } = data;
    const method = (methods[data.method as keyof WorkerNodeMethods] as (...args: unknown[]) => unknown).bind(
      methods,
    );
    Promise.resolve()
      .then(() => method(...(data.args ?? [])))
      .then(
        (value) => {
          scope.postMessage({ call, value });
        },
        (error: unknown) => {
          scope.postMessage({
            call,
            error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
          });
        },
      );
  },
);
