/**
 * Do tc-shaped links in @barnraise/netlab deliver the rates they are configured with?
 *
 *   node bench/netlab-check.ts [seconds per transfer, default 6] [--gbit]
 *
 * Needs root. Builds one lab: an unshaped "hub" and three shaped hosts whose upload and download
 * limits cover 8, 40 and 200 Mbit/s (--gbit adds a 1000/1000 host). One TCP flow at a time runs
 * between a shaped host and the hub (then two flows into one slow download), measured at the receiver
 * after a 1 s warm-up. Rates are link rates, so the best TCP goodput is 1448/1514 ≈ 0.956 × rate
 * (payload per Ethernet frame); the table shows measured/configured. Then round-trip times: idle,
 * through a saturated 8 Mbit/s upload (the queue's delay), and with `delayMs` (netem where the kernel
 * has it, else netlab's delay line): the round trips against what they should be, and a 10 Mbit/s
 * transfer with a 50 ms round trip.
 *
 * The same file is the sender/receiver/echo program run inside the namespaces (`--role …`).
 */
import { readFileSync } from "node:fs";
import { createConnection, createServer, type Socket } from "node:net";
import { fileURLToPath } from "node:url";
import {
  NetLab,
  netemAvailable,
  netlabAvailable,
  tbfParameters,
  TCP_GOODPUT_PER_RATE,
  watchJsonLines,
  type Host,
} from "../packages/netlab/src/index.ts";

const PORT = 5201;
const ECHO_PORT = 5202;
const WARMUP_MS = 1000;

// ---------------------------------------------------------------- roles run inside the namespaces

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/**
 * Counts bytes from `expected` connections and prints the aggregate rate over the time all of them
 * were sending: from `WARMUP_MS` after the last one started to the first end of stream.
 */
function receiver(expected: number): void {
  let total = 0;
  let started = 0;
  let allStartedAt = 0;
  let from: { time: number; bytes: number } | undefined;
  let to: { time: number; bytes: number } | undefined;
  let closed = 0;
  const server = createServer((socket) => {
    let first = true;
    socket.on("data", (chunk: Buffer) => {
      const now = performance.now();
      if (first) {
        first = false;
        if (++started === expected) allStartedAt = now;
      }
      if (from === undefined && allStartedAt > 0 && now - allStartedAt >= WARMUP_MS)
        from = { time: now, bytes: total };
      total += chunk.length;
    });
    socket.on("end", () => (to ??= { time: performance.now(), bytes: total }));
    socket.on("close", () => {
      if (++closed < expected) return;
      if (from === undefined || to === undefined) print({ error: "transfer shorter than the warm-up" });
      else print({ bytes: to.bytes - from.bytes, seconds: (to.time - from.time) / 1000 });
      server.close();
    });
  });
  server.listen(PORT, () => {
    print({ ready: true });
  });
}

/** Sends as fast as the socket takes data, for `seconds`. */
function sender(host: string, seconds: number): void {
  const chunk = Buffer.alloc(128 * 1024, 7);
  const socket = createConnection({ host, port: PORT });
  const end = performance.now() + seconds * 1000;
  let sent = 0;
  const pump = (): void => {
    while (performance.now() < end) {
      sent += chunk.length;
      if (!socket.write(chunk)) return void socket.once("drain", pump);
    }
    socket.end();
  };
  socket.on("connect", pump);
  socket.on("close", () => {
    print({ sent });
  });
}

function echoServer(): void {
  createServer((socket) => socket.pipe(socket)).listen(ECHO_PORT, () => {
    print({ ready: true });
  });
}

/** Sends one byte at a time and waits for the echo; prints RTT statistics in ms. */
function pinger(host: string, count: number, gapMs: number): void {
  const socket: Socket = createConnection({ host, port: ECHO_PORT });
  socket.setNoDelay(true);
  const rtts: number[] = [];
  let sentAt = 0;
  const ping = (): void => {
    sentAt = performance.now();
    socket.write("x");
  };
  socket.on("connect", ping);
  socket.on("data", () => {
    rtts.push(performance.now() - sentAt);
    if (rtts.length < count) return void setTimeout(ping, gapMs);
    rtts.sort((a, b) => a - b);
    const at = (q: number): number => rtts[Math.min(rtts.length - 1, Math.floor(q * rtts.length))] ?? NaN;
    print({ min: at(0), median: at(0.5), p90: at(0.9) });
    socket.end();
  });
}

// ---------------------------------------------------------------- the benchmark

function isReady(value: unknown): value is { ready: true } {
  return typeof value === "object" && value !== null && "ready" in value;
}
function isResult(value: unknown): value is { bytes: number; seconds: number } {
  return typeof value === "object" && value !== null && "bytes" in value && "seconds" in value;
}
function isRtt(value: unknown): value is { min: number; median: number; p90: number } {
  return typeof value === "object" && value !== null && "median" in value;
}

const self = fileURLToPath(import.meta.url);

/** Runs one transfer from each sender to `to` at once; returns the receiver's goodput in Mbit/s. */
async function transfer(from: readonly Host[], to: Host, seconds: number): Promise<number> {
  const receiving = watchJsonLines(to.spawnNode(self, ["--role", "receiver", String(from.length)]));
  await receiving.waitFor(isReady);
  const sending = from.map((host) =>
    watchJsonLines(host.spawnNode(self, ["--role", "sender", to.address, String(seconds)])),
  );
  const result = await receiving.waitFor(isResult, (seconds + 30) * 1000);
  await Promise.all(sending.map((watch) => watch.exited));
  return (result.bytes * 8) / result.seconds / 1e6;
}

async function roundTrip(
  from: Host,
  to: Host,
  count = 50,
  gapMs = 20,
): Promise<{ median: number; p90: number }> {
  const echo = to.spawnNode(self, ["--role", "echo"]);
  await watchJsonLines(echo).waitFor(isReady);
  const ping = watchJsonLines(
    from.spawnNode(self, ["--role", "pinger", to.address, String(count), String(gapMs)]),
  );
  const rtt = await ping.waitFor(isRtt, 60_000);
  echo.kill();
  return rtt;
}

async function main(): Promise<void> {
  const seconds = Number(process.argv.find((arg) => /^\d+(\.\d+)?$/.test(arg)) ?? 6);
  const gbit = process.argv.includes("--gbit");
  const available = await netlabAvailable();
  if (!available.ok) throw new Error(`netlab unavailable: ${available.reason}`);
  const netem = await netemAvailable();
  await NetLab.cleanupStale("nlcheck");
  const lab = await NetLab.create({ name: "nlcheck" });
  try {
    const hub = await lab.addHost({ name: "hub" });
    const shaped = [
      { up: 8, down: 40 },
      { up: 40, down: 200 },
      { up: 200, down: 8 },
      ...(gbit ? [{ up: 1000, down: 1000 }] : []),
    ];
    const hosts = await Promise.all(
      shaped.map((s) =>
        lab.addHost({ name: `up${s.up}down${s.down}`, uploadMbit: s.up, downloadMbit: s.down }),
      ),
    );
    console.log(`netlab check: ${seconds} s per transfer, 1 s warm-up excluded; TCP ${tcpCongestion()}`);
    console.log("link".padEnd(44), "configured".padStart(10), "measured".padStart(10), "ratio".padStart(7));
    const row = (what: string, configured: number, measured: number): void => {
      const ratio = measured / configured;
      console.log(
        what.padEnd(44),
        configured.toFixed(1).padStart(10),
        measured.toFixed(1).padStart(10),
        ratio.toFixed(3).padStart(7),
      );
    };
    const ref = await lab.addHost({ name: "ref" });
    const unshaped = await transfer([ref], hub, seconds);
    console.log(
      "unshaped ref → hub (machine's limit)".padEnd(44),
      "-".padStart(10),
      unshaped.toFixed(1).padStart(10),
    );
    for (const [i, s] of shaped.entries()) {
      const host = hosts[i];
      if (host === undefined) continue;
      row(`upload   ${host.name} → hub`, s.up, await transfer([host], hub, seconds));
      row(`download hub → ${host.name}`, s.down, await transfer([hub], host, seconds));
    }
    const [h8, h40, h200] = hosts;
    if (h8 !== undefined && h40 !== undefined && h200 !== undefined) {
      row(`2 flows  ${h8.name}+${h40.name} → ${h200.name}`, 8, await transfer([h8, h40], h200, seconds));
      row(`2 flows  hub+${h8.name} → ${h40.name} (both)`, 200, await transfer([hub, h8], h40, seconds));
      console.log(`best possible ratio for TCP: ${TCP_GOODPUT_PER_RATE.toFixed(3)} (headers)`);
      for (const rate of [8, 40, 200]) {
        const tbf = tbfParameters({ rateMbit: rate });
        console.log(`  tbf at ${rate} Mbit/s: burst ${tbf.burstBytes} B, limit ${tbf.limitBytes} B`);
      }
      console.log();
      console.log(
        "round trip (TCP, 1-byte echo)".padEnd(44),
        "median ms".padStart(10),
        "p90 ms".padStart(10),
      );
      const rttRow = (what: string, rtt: { median: number; p90: number }): void => {
        console.log(what.padEnd(44), rtt.median.toFixed(2).padStart(10), rtt.p90.toFixed(2).padStart(10));
      };
      rttRow(`idle ${h8.name} ↔ hub`, await roundTrip(h8, hub));
      const bulk = transfer([h8], hub, seconds);
      bulk.catch(() => undefined); // awaited below; this only keeps an early failure from being "unhandled"
      await new Promise((resolve) => setTimeout(resolve, 1500));
      rttRow(`${h8.name} ↔ hub, 8 Mbit/s upload saturated`, await roundTrip(h8, hub, 20, 50));
      await bulk;
    }
    // Latency: netem where the kernel has it, else the delay line (helpers/delay-line.py).
    const how = netem ? "netem" : "the delay line (no netem in this kernel)";
    const far = await lab.addHost({ name: "far", delayMs: 10, uploadMbit: 40, downloadMbit: 40 });
    const far2 = await lab.addHost({ name: "far2", delayMs: 10, uploadMbit: 40, downloadMbit: 40 });
    console.log();
    console.log(`latency by ${how}: "far" and "far2" have 10 ms one-way on their links`);
    console.log(
      "round trip".padEnd(44),
      "expected".padStart(10),
      "median ms".padStart(10),
      "p90 ms".padStart(7),
    );
    for (const [what, from, to, expected] of [
      ["far ↔ hub (one delayed link)", far, hub, 20],
      ["far ↔ far2 (two delayed links)", far, far2, 40],
    ] as const) {
      const rtt = await roundTrip(from, to);
      console.log(
        what.padEnd(44),
        String(expected).padStart(10),
        rtt.median.toFixed(2).padStart(10),
        rtt.p90.toFixed(2).padStart(7),
      );
    }
    // The rate still holds with a 50 ms round trip: 10 Mbit/s, 25 ms one-way.
    const slowFar = await lab.addHost({ name: "slowfar", delayMs: 25, uploadMbit: 10, downloadMbit: 10 });
    row("upload   slowfar → hub (10 Mbit/s, 50 ms RTT)", 10, await transfer([slowFar], hub, seconds));
    row("download hub → slowfar (10 Mbit/s, 50 ms RTT)", 10, await transfer([hub], slowFar, seconds));
  } finally {
    await lab.destroy();
  }
}

function tcpCongestion(): string {
  try {
    return readFileSync("/proc/sys/net/ipv4/tcp_congestion_control", "utf8").trim();
  } catch {
    return "?";
  }
}

const roleIndex = process.argv.indexOf("--role");
if (roleIndex >= 0) {
  const [role, a = "", b = "", c = ""] = process.argv.slice(roleIndex + 1);
  if (role === "receiver") receiver(Number(a));
  else if (role === "sender") sender(a, Number(b));
  else if (role === "echo") echoServer();
  else if (role === "pinger") pinger(a, Number(b), Number(c));
  else throw new Error(`unknown role ${role}`);
} else {
  await main();
}
