/**
 * Signed metrics ingestion on loopback: the real platform (`next start` of apps/web on SQLite, or
 * PostgreSQL with --postgres) receives `POST /api/v1/experiments/{id}/metrics` from an aux peer,
 * each request signed (DeDLOC I.5) with a fresh nonce and step, as an aux monitor sends them.
 *
 *   npm run bench:ingest            # or: node bench/metrics-ingestion.ts [seconds] [connections] [peers]
 *   node bench/metrics-ingestion.ts --postgres   # on a new database of the throwaway cluster of
 *                                                # scripts/postgres.sh (started when needed)
 *
 * Defaults: 10 s, 16 connections, 16 peers per report. It builds apps/web first when the build is
 * missing or older than the sources.
 *
 * Prints requests/s, latency p50/p99, errors, and, measured in the same run, the in-process rate of
 * verifying the same signed requests, so the ratio shows what share of the platform's verification
 * capacity one instance reaches end to end (HTTP, JSON, database writes included). Non-2xx
 * responses make it fail.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import autocannon from "autocannon";
import {
  AccessPassVerifier,
  canonicalJson,
  decodePublicKey,
  generateKeyPair,
  MemoryNonceStore,
  parseExperimentConfig,
  peerIdFromEd25519PublicKey,
  ReplayGuard,
  RequestVerifier,
  signRequest,
  toBase64Url,
  type KeyPair,
} from "../packages/protocol/src/index.ts";
import { nodeCrypto } from "../packages/protocol/src/node.ts";
import { newAuthorityKey } from "../apps/web/src/server/authority-keys.ts";
import { createAppContext, type AppContext } from "../apps/web/src/server/context.ts";
import { openTestDatabase, type TestDatabase } from "../prisma/src/testing.ts";
import { loadServerEnv } from "../apps/web/src/server/env.ts";
import { generatePeerToken } from "../apps/web/src/server/services/peer-tokens.ts";

const postgres = process.argv.includes("--postgres");
const positional = process.argv.slice(2).filter((arg) => arg !== "--postgres");
const seconds = Number(positional[0] ?? 10);
const connections = Number(positional[1] ?? 16);
const peersPerReport = Number(positional[2] ?? 16);

const root = resolve(import.meta.dirname, "..");
const web = join(root, "apps/web");
const EXPERIMENT = "bench";
const METRICS_PATH = `/api/v1/experiments/${EXPERIMENT}/metrics`;

function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<void> {
  const child = spawn(command, args, {
    cwd,
    stdio: "inherit",
    env: { ...process.env, NEXT_TELEMETRY_DISABLED: "1", ...env },
  });
  return new Promise((done, fail) => {
    child.once("error", fail);
    child.once("exit", (code) => {
      if (code === 0) done();
      else fail(new Error(`${command} ${args.join(" ")} exited with ${code}`));
    });
  });
}

async function newestMtime(dir: string): Promise<number> {
  let newest = 0;
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || entry.parentPath.includes("node_modules")) continue;
    newest = Math.max(newest, (await stat(join(entry.parentPath, entry.name))).mtimeMs);
  }
  return newest;
}

/** Builds apps/web (under the lock) when there is no build, or the sources changed since. */
async function ensureBuild(): Promise<void> {
  const buildId = join(web, ".next/BUILD_ID");
  if (existsSync(buildId)) {
    const built = (await stat(buildId)).mtimeMs;
    const sources = Math.max(
      ...(await Promise.all(
        ["apps/web/app", "apps/web/src", "packages/protocol/src", "prisma/src"].map((dir) =>
          newestMtime(join(root, dir)),
        ),
      )),
    );
    if (sources < built) return;
  }
  console.log("building apps/web (the build is missing or older than the sources) …");
  await run("npm", ["run", "build", "-w", "@barnraise/web"], root);
}

/** Signals the server's process group; it may be gone already. */
function stopGroup(group: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-group, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  server.close();
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

async function waitForHealth(base: string, server: ChildProcess): Promise<void> {
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    if (server.exitCode !== null) throw new Error(`next start exited with ${server.exitCode}`);
    try {
      const response = await fetch(`${base}/api/v1/health`);
      if (response.ok) return;
    } catch {
      // not listening yet (or still waiting for the lock)
    }
    await new Promise((done) => setTimeout(done, 250));
  }
  throw new Error("the platform did not become healthy within 180 s");
}

interface Seeded {
  readonly auxToken: string;
  readonly trainerPeerIds: string[];
}

async function seed(ctx: AppContext): Promise<Seeded> {
  const organizer = await ctx.db.user.create({ data: { username: "bench-organizer" } });
  const key = newAuthorityKey(ctx.env.sealingSecrets, { experimentId: EXPERIMENT, keyVersion: 1 });
  await ctx.db.experiment.create({
    data: {
      id: EXPERIMENT,
      name: "Ingestion benchmark",
      organizerId: organizer.id,
      config: new TextDecoder().decode(canonicalJson(parseExperimentConfig({}))),
      authorityPublicKey: key.publicKey,
      authoritySecretKey: key.sealedSecretKey,
    },
  });
  const aux = generatePeerToken();
  await ctx.db.peerToken.create({
    data: {
      experimentId: EXPERIMENT,
      userId: organizer.id,
      role: "aux",
      tokenHash: aux.tokenHash,
      prefix: aux.prefix,
    },
  });
  // Trainer peers whose contributions every report updates.
  const volunteer = await ctx.db.user.create({ data: { username: "bench-volunteer" } });
  await ctx.db.allowlistEntry.create({
    data: { experimentId: EXPERIMENT, userId: volunteer.id, status: "approved" },
  });
  const trainer = generatePeerToken();
  const trainerToken = await ctx.db.peerToken.create({
    data: {
      experimentId: EXPERIMENT,
      userId: volunteer.id,
      role: "trainer",
      tokenHash: trainer.tokenHash,
      prefix: trainer.prefix,
    },
  });
  const trainerPeerIds: string[] = [];
  for (let i = 0; i < peersPerReport; i++) {
    const publicKey = generateKeyPair().publicKey;
    const peerId = peerIdFromEd25519PublicKey(publicKey).toString();
    trainerPeerIds.push(peerId);
    await ctx.db.peer.create({
      data: {
        experimentId: EXPERIMENT,
        userId: volunteer.id,
        tokenId: trainerToken.id,
        publicKey: toBase64Url(publicKey),
        peerId,
        role: "trainer",
        passExpiresAt: new Date(Date.now() + 3_600_000),
        lastSeenAt: new Date(),
      },
    });
  }
  return { auxToken: aux.token, trainerPeerIds };
}

interface Signer {
  readonly key: KeyPair;
  readonly pass: string;
  readonly authority: Uint8Array;
}

function report(step: number, peerIds: readonly string[]): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(
    JSON.stringify({
      step,
      loss: 2 / Math.sqrt(step + 1),
      samplesPerSecond: 512.5,
      alivePeers: peerIds.length,
      time: Date.now(),
      peers: peerIds.map((peerId, i) => ({
        peerId,
        samples: step * 64 + i,
        computeSeconds: step * 0.5,
        bytesAggregated: 0,
        sessionSeconds: step * 0.5,
      })),
    }),
  );
}

function sign(signer: Signer, body: Uint8Array): string {
  return `Barnraise ${signRequest(nodeCrypto, signer.key, {
    pass: signer.pass,
    recipientPublicKey: signer.authority,
    scope: `POST ${METRICS_PATH}`,
    body,
    time: Date.now(),
  })}`;
}

/** The same signed requests verified in this process: the ceiling the platform's checks impose. */
async function verificationRate(signer: Signer, peerIds: readonly string[], count: number): Promise<number> {
  const requests = Array.from({ length: count }, (_, step) => {
    const body = report(step, peerIds);
    return { body, token: sign(signer, body).slice("Barnraise ".length) };
  });
  const verifier = new RequestVerifier({
    crypto: nodeCrypto,
    passes: new AccessPassVerifier({
      crypto: nodeCrypto,
      authorityPublicKey: signer.authority,
      experimentId: EXPERIMENT,
    }),
    recipientPublicKey: signer.authority,
    replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 30_000 }),
  });
  const start = process.hrtime.bigint();
  for (const request of requests) {
    await verifier.verify(request.token, {
      scope: `POST ${METRICS_PATH}`,
      body: request.body,
      roles: ["aux"],
    });
  }
  return count / (Number(process.hrtime.bigint() - start) / 1e9);
}

const dataDir = await mkdtemp(join(tmpdir(), "barnraise-bench-"));
/** A new database on the PostgreSQL cluster of scripts/postgres.sh, or a SQLite file. */
const database = postgres ? await postgresDatabase() : undefined;
const databaseUrl = database?.url ?? `file:${join(dataDir, "barnraise.db")}`;
const serverEnv = {
  AUTH_SECRET: toBase64Url(globalThis.crypto.getRandomValues(new Uint8Array(32))),
  BARNRAISE_SECRET: toBase64Url(globalThis.crypto.getRandomValues(new Uint8Array(32))),
  DATABASE_URL: databaseUrl,
  BARNRAISE_DATA_DIR: dataDir,
  LOG_LEVEL: "warn",
  BARNRAISE_METRICS_TOKEN: toBase64Url(globalThis.crypto.getRandomValues(new Uint8Array(24))),
};
let server: ChildProcess | undefined;
let ctx: AppContext | undefined;
let failed = false;

try {
  await ensureBuild();
  await run(join(root, "node_modules/.bin/prisma"), ["migrate", "deploy"], root, {
    DATABASE_URL: databaseUrl,
  });
  ctx = createAppContext(loadServerEnv({ ...serverEnv, NODE_ENV: "production", LOG_LEVEL: "silent" }));
  const seeded = await seed(ctx);

  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  // Its own process group, so stopping it stops everything the server runs.
  server = spawn(join(root, "node_modules/.bin/next"), ["start", "-p", String(port), "-H", "127.0.0.1"], {
    cwd: web,
    detached: true,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, ...serverEnv, NODE_ENV: "production", NEXT_TELEMETRY_DISABLED: "1" },
  });
  await waitForHealth(base, server);

  const key = generateKeyPair();
  const joined = await fetch(`${base}/api/v1/experiments/${EXPERIMENT}/join`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token: seeded.auxToken, publicKey: toBase64Url(key.publicKey) }),
  });
  if (!joined.ok) throw new Error(`join failed: ${joined.status} ${await joined.text()}`);
  const access = (await joined.json()) as { pass: string; authorityPublicKey: string };
  const signer: Signer = { key, pass: access.pass, authority: decodePublicKey(access.authorityPublicKey) };
  const peerIds = [...seeded.trainerPeerIds, peerIdFromEd25519PublicKey(key.publicKey).toString()];

  // Warm up the server's routes and caches, then measure.
  for (let step = 0; step < 20; step++) {
    const body = report(step, peerIds);
    const response = await fetch(`${base}${METRICS_PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: sign(signer, body) },
      body,
    });
    if (!response.ok) throw new Error(`warm-up request failed: ${response.status} ${await response.text()}`);
  }

  let step = 1000;
  let firstFailure: string | undefined;
  const cpuBefore = await groupCpuSeconds(server.pid ?? 0);
  const result = await autocannon({
    url: base,
    connections,
    duration: seconds,
    requests: [
      {
        method: "POST",
        path: METRICS_PATH,
        setupRequest: (request) => {
          step += 1;
          const body = report(step, peerIds);
          return {
            ...request,
            body: Buffer.from(body),
            headers: {
              ...request.headers,
              "content-type": "application/json",
              authorization: sign(signer, body),
            },
          };
        },
        onResponse: (status, body) => {
          if (status >= 300 && firstFailure === undefined) firstFailure = `${status} ${body}`;
        },
      },
    ],
  });
  const cpuPerRequest = ((await groupCpuSeconds(server.pid ?? 0)) - cpuBefore) / result.requests.total;
  const queries = await queriesPerRequest(
    base,
    serverEnv.BARNRAISE_METRICS_TOKEN,
    result.requests.total + 20,
  );
  const stored = await ctx.db.metric.count({ where: { experimentId: EXPERIMENT } });
  const verifyRate = await verificationRate(signer, peerIds, 5000);

  const perSecond = result.requests.average;
  console.log(
    `Node ${process.version}, ${postgres ? "PostgreSQL" : "SQLite"}, ${connections} connections, ${seconds} s, ` +
      `${peerIds.length} peers per report (${report(1, peerIds).length} bytes)`,
  );
  console.log(
    `requests              ${result.requests.total} (${result["2xx"]} 2xx, ${result.non2xx} non-2xx)`,
  );
  console.log(`errors                ${result.errors} (timeouts ${result.timeouts})`);
  console.log(`throughput            ${perSecond.toFixed(0)} requests/s`);
  console.log(
    `latency               p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, max ${result.latency.max} ms`,
  );
  console.log(`steps stored          ${stored}`);
  console.log(`database queries      ${queries.total.toFixed(1)} per request (${queries.detail})`);
  // CPU time, unlike requests/s, hardly depends on what else the machine runs meanwhile.
  console.log(
    `platform CPU          ${(cpuPerRequest * 1000).toFixed(2)} ms per request ` +
      `(one core's worth: ${(1 / cpuPerRequest).toFixed(0)} requests/s)`,
  );
  console.log(`in-process verify     ${verifyRate.toFixed(0)} signed requests/s (same requests, one core)`);
  console.log(
    `ratio                 ${(perSecond / verifyRate).toFixed(3)} × verification capacity end to end`,
  );
  if (result.non2xx > 0 || result.errors > 0) {
    failed = true;
    console.error(
      `FAILED: ${result.non2xx} non-2xx, ${result.errors} errors; first: ${firstFailure ?? "(none)"}`,
    );
  }
} finally {
  if (server?.pid !== undefined && server.exitCode === null) {
    const group = server.pid;
    const exited = once(server, "exit");
    stopGroup(group, "SIGTERM");
    const stubborn = setTimeout(() => {
      stopGroup(group, "SIGKILL");
    }, 10_000);
    await exited;
    clearTimeout(stubborn);
  }
  await ctx?.db.$disconnect();
  await database?.dispose();
  await rm(dataDir, { recursive: true, force: true });
}
if (failed) process.exitCode = 1;

/**
 * The platform's database queries per ingestion request, from its /metrics (every query it made
 * since it started, over `requests`: the measured ones, the warm-up and the join).
 */
async function queriesPerRequest(base: string, token: string, requests: number) {
  const response = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  const counts = new Map<string, number>();
  for (const line of (await response.text()).split("\n")) {
    const match = /^barnraise_db_query_seconds_count\{model="([^"]*)",operation="([^"]*)"\} (\S+)$/.exec(
      line,
    );
    if (match !== null) counts.set(`${match[1]}.${match[2]}`, Number(match[3]) / requests);
  }
  const sorted = [...counts].sort((a, b) => b[1] - a[1]);
  return {
    total: sorted.reduce((sum, [, count]) => sum + count, 0),
    detail: sorted.map(([name, count]) => `${name} ${count.toFixed(2)}`).join(", "),
  };
}

/**
 * CPU seconds (user and system) used so far by the processes of process group `group`: the platform
 * server and anything it started. Linux only (/proc); clock ticks of 1/100 s.
 */
async function groupCpuSeconds(group: number): Promise<number> {
  let ticks = 0;
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    // Fields after the command name (which may hold spaces): state, ppid, pgrp, … utime (14), stime (15).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === group) ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks / 100;
}

/** Starts (or finds) the throwaway PostgreSQL cluster and makes a database of its own on it. */
async function postgresDatabase(): Promise<TestDatabase> {
  const serverUrl = await new Promise<string>((resolve, reject) => {
    execFile("bash", [join(root, "scripts/postgres.sh"), "start"], (error, stdout) => {
      if (error !== null) reject(new Error(`scripts/postgres.sh start failed: ${error.message}`));
      else resolve(stdout.trim());
    });
  });
  process.env.BARNRAISE_TEST_POSTGRES_URL = serverUrl;
  return openTestDatabase("postgresql");
}
