import { hostWorkerRtc } from "../../src/browser/rtc-bridge/page-rtc-host.ts";

/**
 * The page of a swarm node in a Web Worker (`worker-node-entry.ts`, served as `/worker-node.js`):
 * it hosts WebRTC for the worker, and `globalThis.workerNode.call(method, ...args)` calls the node.
 */

const worker = new Worker(new URL("/worker-node.js", location.href), { type: "module" });
hostWorkerRtc(worker);
const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
let nextCall = 1;
worker.addEventListener(
  "message",
  ({ data }: MessageEvent<{ call?: number; value?: unknown; error?: string }>) => {
    // The worker's WebRTC calls (`barnraiseRtc`) are the host's.
    if (typeof data.call !== "number" || "barnraiseRtc" in data) return;
    const waiting = pending.get(data.call);
    pending.delete(data.call);
    if (data.error !== undefined) waiting?.reject(new Error(data.error));
    else waiting?.resolve(data.value);
  },
);

const workerNode = {
  call(method: string, ...args: unknown[]): Promise<unknown> {
    const call = nextCall++;
    const { promise, resolve, reject } = Promise.withResolvers<unknown>();
    pending.set(call, { resolve, reject });
    worker.postMessage({ call, method, args });
    return promise;
  },
};

export type WorkerNodePage = typeof workerNode;

(globalThis as { workerNode?: WorkerNodePage }).workerNode = workerNode;
