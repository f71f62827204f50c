/**
 * What a node needs of a browser: the runtime implementations of the engine's ports for a web page
 * or worker. The engine itself is `@barnraise/swarm`.
 */
export * from "./browser/indexeddb-node-store.ts";
export * from "./browser/browser-transports.ts";
export { setSolverWasmBase } from "./averaging/load-balancing.ts";
export { installWorkerRtc } from "./browser/rtc-bridge/worker-rtc.ts";
export { hostWorkerRtc, type RtcWorkerPort } from "./browser/rtc-bridge/page-rtc-host.ts";
