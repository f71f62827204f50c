import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream, existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  decodePublicKey,
  generateKeyPair,
  signRequest,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { expect, request as playwrightRequest, test, type APIRequestContext } from "@playwright/test";
import { startS3Server } from "../../apps/web/test/support/s3-server.ts";
import { createAuxToken, publishRun, type Checkpoint } from "../support/runs.ts";
import { register } from "../support/ui.ts";
import { launchWebServer, type RunningWebServer } from "../support/web-server.ts";

// Two platforms (`next start`) behind HAProxy from Debian, on one PostgreSQL database and one
// S3-compatible bucket (s3rver), each with a data directory of its own, as a self-hoster grows past one
// machine. The datasets are prepared into the bucket; the organizer publishes a run through the proxy
// (each request may land on either instance); then a client that alternates instances is rate-limited
// once, not once per instance; a signed request replayed to the other instance is refused; and a
// checkpoint uploaded through one instance is listed and served by the other, from the bucket.

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
const METRICS_TOKEN = randomBytes(24).toString("base64url");
/** rate-limit.ts's `join` limit: join requests per client address a minute. */
const JOIN_LIMIT = 60;

const run = promisify(execFile);
const cleanups: (() => Promise<void>)[] = [];

test.afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) {
    await cleanup().catch((error: unknown) => {
      process.stderr.write(`cleanup failed: ${String(error)}\n`);
    });
  }
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/**
 * A throwaway PostgreSQL cluster of its own (scripts/postgres.sh on a free port, in its default
 * directory, which the postgres user can reach); its URL.
 */
async function startPostgres(): Promise<string> {
  const env = { ...process.env, BARNRAISE_PG_PORT: String(await freePort()) };
  const script = join(repoRoot, "scripts/postgres.sh");
  const { stdout } = await run("bash", [script, "start"], { env });
  cleanups.push(async () => {
    await run("bash", [script, "stop"], { env });
  });
  return stdout.trim();
}

/** HAProxy in front of `backends`, round robin, adding X-Forwarded-For; resolves once it answers. */
async function startHaproxy(dir: string, port: number, backends: readonly number[]): Promise<void> {
  const config = join(dir, "haproxy.cfg");
  await writeFile(
    config,
    [
      "global",
      "  maxconn 256",
      "defaults",
      "  mode http",
      "  option forwardfor",
      "  timeout connect 5s",
      "  timeout client 120s",
      "  timeout server 120s",
      "frontend platform",
      `  bind 127.0.0.1:${port}`,
      "  default_backend instances",
      "backend instances",
      "  balance roundrobin",
      ...backends.map((backend, i) => `  server web${i + 1} 127.0.0.1:${backend}`),
      "",
    ].join("\n"),
  );
  const log = createWriteStream(join(dir, "haproxy.log"));
  const child: ChildProcess = spawn("/usr/sbin/haproxy", ["-f", config, "-db"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  cleanups.push(async () => {
    child.kill("SIGTERM");
    await new Promise((resolve) => log.end(resolve));
  });
  const deadline = Date.now() + 15_000;
  for (;;) {
    const up = await fetch(`http://127.0.0.1:${port}/api/v1/health`).then(
      (response) => response.ok,
      () => false,
    );
    if (up) return;
    if (child.exitCode !== null)
      throw new Error(`haproxy exited with ${child.exitCode}; see ${dir}/haproxy.log`);
    if (Date.now() > deadline) throw new Error("haproxy did not answer within 15 s");
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

interface Node {
  readonly key: KeyPair;
  readonly pass: string;
  readonly authority: Uint8Array;
}

/** A signed checkpoint upload of `body` at `step`, as the aux sends it: path, headers and body. */
function checkpointUpload(node: Node, experimentId: string, step: number, body: Uint8Array) {
  const path = `/api/v1/experiments/${experimentId}/checkpoints?step=${step}&sizeBytes=${body.length}`;
  const token = signRequest(nodeCrypto, node.key, {
    pass: node.pass,
    recipientPublicKey: node.authority,
    scope: `POST ${path}`,
    body: { sha256: new Uint8Array(createHash("sha256").update(body).digest()) },
    time: Date.now(),
  });
  return {
    path,
    headers: { authorization: `Barnraise ${token}`, "content-type": "application/octet-stream" },
    data: Buffer.from(body),
  };
}

/** Requests of `method` on `route` that an instance answered, from its /metrics. */
async function answered(api: APIRequestContext, route: string, method: string): Promise<number> {
  const response = await api.get("/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  expect(response.status()).toBe(200);
  let total = 0;
  for (const line of (await response.text()).split("\n")) {
    if (
      line.startsWith("barnraise_http_requests_total{") &&
      line.includes(`route="${route}"`) &&
      line.includes(`method="${method}"`)
    ) {
      total += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return total;
}

test("two platforms behind a reverse proxy on PostgreSQL share rate limits, replay protection and storage", async ({
  browser,
}, testInfo) => {
  test.setTimeout(5 * 60_000);
  const dir = await mkdtemp(join(tmpdir(), "barnraise-instances-"));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const databaseUrl = await startPostgres();
  const [proxyPort, portA, portB] = [await freePort(), await freePort(), await freePort()];
  const publicUrl = `http://127.0.0.1:${proxyPort}`;
  const s3 = await startS3Server("barnraise-instances");
  cleanups.push(() => s3.close());
  const env = { BARNRAISE_METRICS_TOKEN: METRICS_TOKEN, ...s3.env("platform/") };

  const instances: RunningWebServer[] = [];
  const first = await launchWebServer({
    port: portA,
    logFile: testInfo.outputPath("web-1.log"),
    databaseUrl,
    publicUrl,
    env,
  });
  instances.push(first);
  cleanups.push(async () => {
    await Promise.all(instances.map((instance) => instance.stop()));
    await rm(first.dataDir, { recursive: true, force: true });
  });
  // The second shares the first's database and bucket, not its data directory.
  const secondDataDir = await mkdtemp(join(tmpdir(), "barnraise-instance-2-"));
  cleanups.push(() => rm(secondDataDir, { recursive: true, force: true }));
  instances.push(
    await launchWebServer({
      port: portB,
      logFile: testInfo.outputPath("web-2.log"),
      dataDir: secondDataDir,
      databaseUrl,
      publicUrl,
      env,
    }),
  );
  await startHaproxy(dir, proxyPort, [portA, portB]);

  const [proxy, direct1, direct2] = await Promise.all([
    playwrightRequest.newContext({ baseURL: publicUrl }),
    playwrightRequest.newContext({ baseURL: `http://127.0.0.1:${portA}` }),
    playwrightRequest.newContext({ baseURL: `http://127.0.0.1:${portB}` }),
  ]);
  cleanups.push(async () => {
    await Promise.all([proxy.dispose(), direct1.dispose(), direct2.dispose()]);
  });

  // The organizer works through the proxy: sessions (JWT) hold on whichever instance answers.
  const context = await browser.newContext({ baseURL: publicUrl });
  cleanups.push(() => context.close());
  const organizer = await context.newPage();
  const experimentId = `instances-${randomBytes(3).toString("hex")}`;
  await register(organizer, `org-${randomBytes(3).toString("hex")}`);
  await publishRun(organizer, {
    id: experimentId,
    name: "Two instances",
    targetBatch: 256,
    localBatch: 32,
    checkpointEvery: 5,
  });
  const auxToken = await createAuxToken(organizer, "aux");

  // The aux joins through the proxy: one join request of this client address.
  const key = generateKeyPair();
  const joined = await proxy.post(`/api/v1/experiments/${experimentId}/join`, {
    data: { token: auxToken, publicKey: toBase64Url(key.publicKey) },
  });
  expect(joined.status(), await joined.text()).toBe(200);
  const pass = (await joined.json()) as { pass: string; authorityPublicKey: string };
  const aux: Node = { key, pass: pass.pass, authority: decodePublicKey(pass.authorityPublicKey) };

  // An upload through the first instance is listed and served by the second.
  const bytes = new Uint8Array(randomBytes(64 * 1024));
  const upload = checkpointUpload(aux, experimentId, 5, bytes);
  const uploaded = await direct1.post(upload.path, { headers: upload.headers, data: upload.data });
  expect(uploaded.status(), await uploaded.text()).toBe(201);
  const listed = await direct2.get(`/api/v1/experiments/${experimentId}/checkpoints`);
  const { checkpoints } = (await listed.json()) as { checkpoints: Checkpoint[] };
  expect(checkpoints.map((checkpoint) => checkpoint.step)).toEqual([5]);
  const downloaded = await direct2.get(checkpoints.map((checkpoint) => checkpoint.downloadUrl).join());
  expect(downloaded.status()).toBe(200);
  expect(Buffer.compare(await downloaded.body(), Buffer.from(bytes))).toBe(0);
  // Kept in the bucket: neither instance has checkpoints, models or datasets on its own disk.
  for (const dataDir of [first.dataDir, secondDataDir]) {
    for (const folder of ["checkpoints", "models", "datasets"]) {
      expect(existsSync(join(dataDir, folder)), `${dataDir}/${folder}`).toBe(false);
    }
  }

  // The same signed request, replayed byte for byte to the other instance, is refused as a replay.
  const replayed = await direct2.post(upload.path, { headers: upload.headers, data: upload.data });
  expect(replayed.status()).toBe(409);
  expect(await replayed.json()).toMatchObject({ error: { code: "REQUEST_REPLAYED" } });

  // Join requests through the proxy (round robin: alternating instances) until one is refused: the
  // address has the limit once, the aux's join included, not once per instance.
  const before = await Promise.all(
    [direct1, direct2].map((api) => answered(api, "/api/v1/experiments/{id}/join", "POST")),
  );
  let allowed = 1;
  for (;;) {
    const response = await proxy.post(`/api/v1/experiments/${experimentId}/join`, { data: {} });
    if (response.status() === 429) {
      expect(Number(response.headers()["retry-after"])).toBeGreaterThan(0);
      break;
    }
    expect(response.status()).toBe(400);
    allowed += 1;
    expect(allowed, "join requests allowed before the limit").toBeLessThanOrEqual(2 * JOIN_LIMIT);
  }
  expect(allowed).toBe(JOIN_LIMIT);
  const after = await Promise.all(
    [direct1, direct2].map((api) => answered(api, "/api/v1/experiments/{id}/join", "POST")),
  );
  // Both instances answered about half of them.
  for (const [i, count] of after.entries()) {
    expect(count - (before[i] ?? 0), `join requests instance ${i + 1} answered`).toBeGreaterThanOrEqual(
      JOIN_LIMIT / 4,
    );
  }
});
