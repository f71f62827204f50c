/**
 * A browser tab's two direct paths to a full node, measured in one run: a swarm node in a Chromium
 * Web Worker (as "Contribute from this browser" runs it) downloads the same bytes from a Node.js
 * node over WebSockets and over WebRTC-direct (whose connection the page holds for the worker,
 * `hostWorkerRtc`), on loopback. Prints each path's throughput, the time to connect, and WebRTC's
 * throughput against WebSockets'.
 *
 *   node bench/tab-transports.ts [--mib 32] [--runs 3]
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { BrowserLab } from "@barnraise/browserlab";
import type { JSHandle } from "playwright-core";
import { loadNodeTransports } from "../packages/swarm/src/node/node-transports.ts";
import { serveDownloads } from "../packages/swarm/test/support/echo-method.ts";
import { startNode, TestAuthority } from "../packages/swarm/test/support/swarm-fixtures.ts";
import { bundleWorkerNode } from "../packages/swarm/test/support/worker-node-bundle.ts";
import type { WorkerNodePage } from "../packages/swarm/test/support/worker-page-entry.ts";

const { values } = parseArgs({
  options: { mib: { type: "string", default: "32" }, runs: { type: "string", default: "3" } },
});
const bytes = Math.round(Number(values.mib) * 2 ** 20);
const runs = Number(values.runs);
if (!(bytes > 0) || !Number.isInteger(runs) || runs < 1) {
  console.error("--mib must be a positive number and --runs a positive integer");
  process.exit(2);
}

const support = new URL("../packages/swarm/test/support/", import.meta.url).pathname;
const bundle = await bundleWorkerNode();
const built = bundle.directory;
const lab = await BrowserLab.start({ files: [bundle.file] });
const authority = new TestAuthority();
const networking = await loadNodeTransports();
if (networking.withoutWebRtc !== undefined)
  throw new Error(`no WebRTC-direct here: ${networking.withoutWebRtc}`);
const member = await startNode(authority, {
  username: "native",
  transports: networking.transports,
  listen: ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/tcp/0/ws", "/ip4/127.0.0.1/udp/0/webrtc-direct"],
});
serveDownloads(member.rpc);

function call<T>(page: JSHandle<WorkerNodePage>, method: string, ...args: unknown[]): Promise<T> {
  return page.evaluate((node, [name, rest]) => node.call(name, ...rest), [
    method,
    args,
  ] as const) as Promise<T>;
}

async function measure(
  path: "WebSockets" | "WebRTC-direct",
): Promise<{ connectMs: number; mibPerSecond: number }> {
  const marker = path === "WebSockets" ? "/ws/" : "/webrtc-direct/";
  const address = member.multiaddrs().find((candidate) => candidate.includes(marker));
  if (address === undefined) throw new Error(`no ${path} address: ${member.multiaddrs().join(" ")}`);
  const identity = generateKeyPair();
  const { handle } = await lab.open<WorkerNodePage>(join(support, "worker-page-entry.ts"), "workerNode");
  const opened = performance.now();
  const { peerId } = await call<{ peerId: string }>(handle, "start", {
    experimentId: authority.experimentId,
    authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
    publicKey: toBase64Url(identity.publicKey),
    secretKey: toBase64Url(identity.secretKey),
    pass: authority.pass(identity, { username: "tab" }),
    bootstrap: address,
  });
  while (!member.members().includes(peerId)) await new Promise((resolve) => setTimeout(resolve, 10));
  const connectMs = performance.now() - opened;
  const connections = await call<string[]>(handle, "connections", member.peerId);
  if (!connections.every((connection) => connection.includes(marker))) {
    throw new Error(`the tab reached the node another way: ${connections.join(" ")}`);
  }
  let best = 0;
  for (let run = 0; run < runs; run++) {
    const started = performance.now();
    const got = await call<{ bytes: number; intact: boolean }>(handle, "download", member.peerId, bytes);
    const seconds = (performance.now() - started) / 1000;
    if (got.bytes !== bytes || !got.intact) throw new Error(`${path}: ${JSON.stringify(got)}`);
    best = Math.max(best, bytes / 2 ** 20 / seconds);
  }
  await call(handle, "stop");
  await lab.closePages();
  return { connectMs, mibPerSecond: best };
}

try {
  const ws = await measure("WebSockets");
  const rtc = await measure("WebRTC-direct");
  console.log(
    `a tab's worker downloading ${values.mib} MiB from a Node.js node on loopback (best of ${runs}):`,
  );
  console.log(`| path          | connect (start to admitted) | MiB/s |`);
  console.log(`| ------------- | --------------------------- | ----- |`);
  for (const [name, result] of [
    ["WebSockets", ws],
    ["WebRTC-direct", rtc],
  ] as const) {
    console.log(
      `| ${name.padEnd(13)} | ${`${result.connectMs.toFixed(0)} ms`.padEnd(27)} | ${result.mibPerSecond.toFixed(1).padStart(5)} |`,
    );
  }
  console.log(`WebRTC-direct / WebSockets throughput: ${(rtc.mibPerSecond / ws.mibPerSecond).toFixed(2)}`);
} finally {
  await member.stop();
  await lab.stop();
  await rm(built, { recursive: true, force: true });
}
