/**
 * Node.js entry point: the swarm engine (everything `@barnraise/swarm` exports) and what a node
 * needs of Node.js around it: its identity and authority pin in files, Prometheus metrics served
 * over HTTP, checkpoint files to upload, and the programs' command-line support. The engine itself
 * imports none of it, so it also runs in a browser.
 */
export * from "./index.ts";
export * from "./node/identity-file.ts";
export * from "./node/authority-pin-file.ts";
export * from "./node/identity-command.ts";
export * from "./node/cli-support.ts";
export { PrivateFileError } from "./node/private-file.ts";
export * from "./node/prometheus-metrics.ts";
export * from "./node/upload-file.ts";
export * from "./node/node-transports.ts";
