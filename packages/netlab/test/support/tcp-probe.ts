/**
 * Tiny TCP server and client run with `node -e` inside lab hosts, to check who can reach whom.
 * The server answers every connection with its host's name, so a test sees which host answered.
 */
import type { ChildProcess } from "node:child_process";
import { watchJsonLines, type Host } from "../../src/index.ts";

export const PROBE_PORT = 7000;

const SERVER = `
const [port, name] = process.argv.slice(1);
require("node:net").createServer((socket) => socket.end(name))
  .listen(Number(port), () => console.log(JSON.stringify({ listening: true })));
`;

const CLIENT = `
const [host, port, timeout] = process.argv.slice(1);
const done = (result) => { console.log(JSON.stringify(result)); process.exit(0); };
const socket = require("node:net").createConnection({ host, port: Number(port), timeout: Number(timeout) });
let reply = "";
socket.on("data", (chunk) => (reply += chunk));
socket.on("end", () => done({ ok: true, reply }));
socket.on("timeout", () => done({ ok: false, error: "ETIMEDOUT" }));
socket.on("error", (error) => done({ ok: false, error: error.code }));
`;

/** What a connection attempt from one host to an address gave. */
export type ProbeResult = { ok: true; reply: string } | { ok: false; error: string };

function isListening(value: unknown): value is { listening: true } {
  return typeof value === "object" && value !== null && "listening" in value;
}

/** Starts a probe server on `host` and resolves once it listens. */
export async function startProbeServer(host: Host): Promise<ChildProcess> {
  const child = host.spawn(process.execPath, ["-e", SERVER, String(PROBE_PORT), host.name]);
  await watchJsonLines(child).waitFor(isListening);
  return child;
}

/** Connects from `host` to `address` (timing out after `timeoutMs`) and reports what happened. */
export async function probe(host: Host, address: string, timeoutMs = 800): Promise<ProbeResult> {
  const result = await host.exec(process.execPath, [
    "-e",
    CLIENT,
    address,
    String(PROBE_PORT),
    String(timeoutMs),
  ]);
  return JSON.parse(result.stdout) as ProbeResult;
}

const CONNECT_TIMER = `
const [host, port, count] = process.argv.slice(1);
const times = [];
const once = () => {
  const started = performance.now();
  const socket = require("node:net").createConnection({ host, port: Number(port) });
  socket.on("connect", () => {
    times.push(performance.now() - started);
    socket.destroy();
    if (times.length < Number(count)) once();
    else console.log(JSON.stringify({ times }));
  });
  socket.on("error", (error) => { console.log(JSON.stringify({ error: error.code })); process.exit(0); });
};
once();
`;

/**
 * The shortest of `count` TCP connection set-ups from `host` to a probe server at `address`, in ms:
 * a SYN and its SYN-ACK, one round trip.
 */
export async function connectRoundTripMs(host: Host, address: string, count = 5): Promise<number> {
  const result = await host.exec(process.execPath, [
    "-e",
    CONNECT_TIMER,
    address,
    String(PROBE_PORT),
    String(count),
  ]);
  const parsed = JSON.parse(result.stdout) as { times?: number[]; error?: string };
  if (parsed.times === undefined) throw new Error(`could not connect: ${parsed.error ?? result.stderr}`);
  return Math.min(...parsed.times);
}
