import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair, peerIdFromEd25519PublicKey, type KeyPair } from "@barnraise/protocol";
import { AuthorityKeys, type JoinedExperiment, joinPlatform, peerToken } from "@barnraise/swarm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import {
  AuxPlatformClient,
  MAX_RESPONSE_BYTES,
  PlatformRequestError,
  type AuxPlatformClientOptions,
  type MetricsReportBody,
} from "../src/platform-client.ts";

/**
 * The aux peer's signed calls against the real platform over HTTP: what it registers, posts and
 * uploads is what volunteers and the dashboard then see, and what the platform refuses (a trainer's
 * pass, a file that is not the signed one, a replay) comes back as a typed, non-retryable error.
 */

interface Node {
  readonly keyPair: KeyPair;
  readonly peerId: string;
  readonly joined: JoinedExperiment;
}

let platform: PlatformServer;
let experimentId: string;
let aux: Node;
let dir: string;

beforeAll(async () => {
  platform = await startPlatformServer();
  experimentId = (await platform.createExperiment()).id;
  aux = await joinWith(await platform.createAuxToken(experimentId));
  dir = await mkdtemp(join(tmpdir(), "barnraise-aux-client-"));
}, 30_000);

afterAll(async () => {
  // No handler failed on anything the client sent.
  expect(platform.errors).toEqual([]);
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

async function joinWith(token: string): Promise<Node> {
  const keyPair = generateKeyPair();
  const joined = await joinPlatform({ server: platform.url, credential: peerToken(token), keyPair });
  return { keyPair, peerId: peerIdFromEd25519PublicKey(keyPair.publicKey).toString(), joined };
}

function clientFor(node: Node, options: Partial<AuxPlatformClientOptions> = {}): AuxPlatformClient {
  return new AuxPlatformClient({
    server: platform.url,
    experimentId,
    keyPair: node.keyPair,
    authority: AuthorityKeys.fromJoin(node.joined),
    pass: () => node.joined.passToken,
    ...options,
  });
}

async function getJson(path: string): Promise<unknown> {
  const response = await fetch(new URL(path, platform.url));
  expect(response.status).toBe(200);
  return response.json();
}

async function listedCheckpoints(): Promise<{ step: number; sha256: string; downloadUrl: string }[]> {
  const list = (await getJson(`api/v1/experiments/${experimentId}/checkpoints`)) as {
    checkpoints: { step: number; sha256: string; downloadUrl: string }[];
  };
  return list.checkpoints;
}

async function checkpointFile(
  name: string,
  bytes: Uint8Array,
): Promise<{ path: string; sha256: Uint8Array }> {
  const path = join(dir, name);
  await writeFile(path, bytes);
  return { path, sha256: new Uint8Array(createHash("sha256").update(bytes).digest()) };
}

function report(step: number, peers: MetricsReportBody["peers"] = []): MetricsReportBody {
  return {
    generation: 0,
    step,
    loss: 2.5 - step / 100,
    samplesPerSecond: 120,
    alivePeers: 2,
    time: Date.now(),
    peers,
  };
}

function requestUrl(input: string | URL | Request): string {
  return input instanceof Request ? input.url : input.toString();
}

/** The rejection of `promise`, which must be a PlatformRequestError. */
async function refusal(promise: Promise<unknown>): Promise<PlatformRequestError> {
  const error: unknown = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(PlatformRequestError);
  return error as PlatformRequestError;
}

describe("AuxPlatformClient against the platform", () => {
  it("registers the aux peer's address, which a volunteer's join then lists as an initial peer", async () => {
    const multiaddr = `/ip4/127.0.0.1/tcp/4001/p2p/${aux.peerId}`;
    await clientFor(aux).registerAddress([multiaddr]);

    const volunteer = await joinWith((await platform.addVolunteer(experimentId)).token);
    expect(volunteer.joined.initialPeers).toContain(multiaddr);
  });

  it("refuses to register another node's address with the platform's code, not retryable", async () => {
    const error = await refusal(
      clientFor(aux).registerAddress([`/ip4/127.0.0.1/tcp/4001/p2p/${"x".repeat(8)}`]),
    );
    expect(error).toMatchObject({ code: "INVALID_INPUT", status: 400, retryable: false });
    expect(error.message).toContain(`/p2p/${aux.peerId}`);
  });

  it("posts metrics that the experiment's loss curve then shows, counting unknown peers", async () => {
    const volunteer = await joinWith((await platform.addVolunteer(experimentId)).token);
    const contribution = { samples: 640, computeSeconds: 12.5, bytesAggregated: 4096, sessionSeconds: 30 };
    const answer = await clientFor(aux).postMetrics(
      report(7, [
        { peerId: volunteer.peerId, ...contribution },
        { peerId: "12D3KooWNotAPeerOfThisExperiment", ...contribution },
      ]),
    );
    expect(answer).toEqual({ unknownPeers: 1, stored: true, timeline: 0, lastStep: 7 });

    const series = (await getJson(`api/v1/experiments/${experimentId}/metrics`)) as {
      points: { step: number; loss: number; samplesPerSecond: number; alivePeers: number }[];
    };
    expect(series.points).toContainEqual(
      expect.objectContaining({ step: 7, loss: 2.43, samplesPerSecond: 120, alivePeers: 2 }),
    );
  });

  it("uploads a checkpoint streamed from disk: it is listed and its download hashes to the signed SHA-256", async () => {
    const bytes = randomBytes(300 * 1024 + 17);
    const file = await checkpointFile("step-40.ckpt", bytes);
    const uploaded = await clientFor(aux).uploadCheckpoint(
      { ...file, sizeBytes: bytes.byteLength },
      { step: 40, loss: 0.75 },
    );
    const hex = Buffer.from(file.sha256).toString("hex");
    expect(uploaded).toMatchObject({ step: 40, loss: 0.75, sizeBytes: bytes.byteLength, sha256: hex });

    expect(await listedCheckpoints()).toContainEqual(
      expect.objectContaining({ step: 40, sha256: hex, downloadUrl: uploaded.downloadUrl }),
    );
    const download = await fetch(new URL(uploaded.downloadUrl, platform.url));
    expect(download.status).toBe(200);
    const downloaded = new Uint8Array(await download.arrayBuffer());
    expect(createHash("sha256").update(downloaded).digest("hex")).toBe(hex);
  });

  it("uploads a checkpoint without a loss", async () => {
    const bytes = randomBytes(1000);
    const file = await checkpointFile("step-41.ckpt", bytes);
    const uploaded = await clientFor(aux).uploadCheckpoint({ ...file, sizeBytes: 1000 }, { step: 41 });
    expect(uploaded).toMatchObject({ step: 41, loss: null, sizeBytes: 1000 });
  });

  it("records a checkpoint's held-out evaluation, listed with it; a second one is a non-retryable CONFLICT", async () => {
    const bytes = randomBytes(1000);
    const file = await checkpointFile("step-42.ckpt", bytes);
    const uploaded = await clientFor(aux).uploadCheckpoint({ ...file, sizeBytes: 1000 }, { step: 42 });
    const evaluation = { metric: "accuracy" as const, value: 0.875, loss: 0.4, samples: 1000 };
    await clientFor(aux).postEvaluation(uploaded.id, evaluation);
    const list = (await getJson(`api/v1/experiments/${experimentId}/checkpoints`)) as {
      checkpoints: { id: string; evaluation: unknown }[];
    };
    expect(list.checkpoints.find((checkpoint) => checkpoint.id === uploaded.id)?.evaluation).toMatchObject(
      evaluation,
    );

    const again = await refusal(clientFor(aux).postEvaluation(uploaded.id, { ...evaluation, value: 0.9 }));
    expect(again).toMatchObject({ code: "CONFLICT", status: 409, retryable: false });
    const unknown = await refusal(clientFor(aux).postEvaluation("no/such id", evaluation));
    expect(unknown).toMatchObject({ code: "NOT_FOUND", status: 404, retryable: false });
  });

  it("flags a trainer whose contributions hurt; a trainer cannot, and an unknown PeerId is NOT_FOUND", async () => {
    const trainer = await joinWith((await platform.addVolunteer(experimentId)).token);
    const flag = {
      peerId: trainer.peerId,
      epoch: 9,
      generation: 0,
      firstHurtEpoch: 8,
      baselineLoss: 2.1,
      lossAfter: null,
      medianDelta: -0.01,
      normRatio: 1000,
      hurtSamples: 2,
      recentSamples: 3,
    };
    await clientFor(aux).postValidatorFlag(flag);
    const byTrainer = await refusal(clientFor(trainer).postValidatorFlag(flag));
    expect(byTrainer).toMatchObject({ code: "PASS_WRONG_ROLE", status: 401, retryable: false });
    const unknown = await refusal(clientFor(aux).postValidatorFlag({ ...flag, peerId: aux.peerId }));
    expect(unknown).toMatchObject({ code: "NOT_FOUND", status: 404, retryable: false });
  });

  it("refuses a file whose bytes are not the signed SHA-256 with CHECKSUM_MISMATCH, and lists nothing", async () => {
    const signed = await checkpointFile("signed.ckpt", randomBytes(64 * 1024));
    const other = await checkpointFile("other.ckpt", randomBytes(64 * 1024));
    const error = await refusal(
      clientFor(aux).uploadCheckpoint(
        { path: other.path, sizeBytes: 64 * 1024, sha256: signed.sha256 },
        { step: 50, loss: 0.5 },
      ),
    );
    expect(error).toMatchObject({ code: "CHECKSUM_MISMATCH", status: 400, retryable: false });
    expect((await listedCheckpoints()).map((checkpoint) => checkpoint.step)).not.toContain(50);
  });

  it("checks the file's size before sending anything", async () => {
    const file = await checkpointFile("short.ckpt", randomBytes(100));
    await expect(clientFor(aux).uploadCheckpoint({ ...file, sizeBytes: 101 }, { step: 51 })).rejects.toThrow(
      /is 100 bytes, not sizeBytes \(101\)/,
    );
    await expect(
      clientFor(aux).uploadCheckpoint(
        { ...file, path: join(dir, "missing.ckpt"), sizeBytes: 100 },
        { step: 51 },
      ),
    ).rejects.toMatchObject({ code: "ENOENT" });
    expect((await listedCheckpoints()).map((checkpoint) => checkpoint.step)).not.toContain(51);
  });

  it("is refused with a trainer's pass: a typed code, not retryable, and nothing is kept", async () => {
    const trainer = await joinWith((await platform.addVolunteer(experimentId)).token);
    const asTrainer = clientFor(trainer);

    const metrics = await refusal(asTrainer.postMetrics(report(60)));
    expect(metrics).toMatchObject({ code: "PASS_WRONG_ROLE", status: 401, retryable: false });
    const address = await refusal(asTrainer.registerAddress([`/ip4/10.0.0.9/tcp/1/p2p/${trainer.peerId}`]));
    expect(address).toMatchObject({ code: "PASS_WRONG_ROLE", retryable: false });

    // Refused before the platform reads the body: the client still ends cleanly.
    const bytes = randomBytes(2 * 1024 * 1024);
    const file = await checkpointFile("trainer.ckpt", bytes);
    const upload = await refusal(
      asTrainer.uploadCheckpoint({ ...file, sizeBytes: bytes.byteLength }, { step: 61 }),
    );
    expect(upload).toMatchObject({ code: "PASS_WRONG_ROLE", retryable: false });

    const series = (await getJson(`api/v1/experiments/${experimentId}/metrics`)) as {
      points: { step: number }[];
    };
    expect(series.points.map((point) => point.step)).not.toContain(60);
    expect((await listedCheckpoints()).map((checkpoint) => checkpoint.step)).not.toContain(61);
  });

  it("reads the pass for every request, so a refreshed pass is used at once", async () => {
    let pass = "not-a-pass";
    const client = clientFor(aux, { pass: () => pass });
    const stale = await refusal(client.postMetrics(report(70)));
    expect(stale).toMatchObject({ status: 400, retryable: false });

    pass = aux.joined.passToken;
    await expect(client.postMetrics(report(70))).resolves.toMatchObject({ unknownPeers: 0, stored: true });
  });

  it("signs with its clock: a request from a clock an hour off is refused", async () => {
    const skewed = clientFor(aux, { now: () => Date.now() - 3_600_000 });
    const error = await refusal(skewed.postMetrics(report(71)));
    expect(error).toMatchObject({ code: "REQUEST_CLOCK_SKEW", status: 401, retryable: false });
  });

  it("is refused when the request it signed is sent again (replay)", async () => {
    const sent: { url: string; init: RequestInit }[] = [];
    const recording: typeof fetch = (input, init) => {
      sent.push({ url: requestUrl(input), init: init ?? {} });
      return fetch(input, init);
    };
    await clientFor(aux, { fetch: recording }).postMetrics(report(80));
    const original = sent[0];
    expect(original).toBeDefined();
    if (original === undefined) return;

    const headers = new Headers(original.init.headers);
    expect(headers.get("authorization")).toMatch(/^Barnraise /);
    const replay = await fetch(original.url, { method: "POST", headers, body: original.init.body ?? null });
    expect(replay.status).toBe(409);
    expect(await replay.json()).toMatchObject({ error: { code: "REQUEST_REPLAYED" } });
  });
});

describe("AuxPlatformClient when the platform is not there", () => {
  it("gives a retryable NETWORK error for a stopped server", async () => {
    const server = createServer();
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as AddressInfo;
    server.close();
    await once(server, "close");

    const client = clientFor(aux, { server: new URL(`http://127.0.0.1:${port}/`) });
    const error = await refusal(client.postMetrics(report(90)));
    expect(error).toMatchObject({ code: "NETWORK", status: undefined, retryable: true });
    expect(error.message).toContain("ECONNREFUSED");

    const file = await checkpointFile("unsent.ckpt", randomBytes(1000));
    const upload = await refusal(client.uploadCheckpoint({ ...file, sizeBytes: 1000 }, { step: 90 }));
    expect(upload).toMatchObject({ code: "NETWORK", retryable: true });
  });

  it("gives a retryable TIMEOUT error when no answer comes in time", async () => {
    const server = createServer(() => undefined);
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as AddressInfo;
    try {
      const client = clientFor(aux, { server: new URL(`http://127.0.0.1:${port}/`), timeoutMs: 200 });
      const error = await refusal(client.registerAddress([`/ip4/127.0.0.1/tcp/1/p2p/${aux.peerId}`]));
      expect(error).toMatchObject({ code: "TIMEOUT", status: undefined, retryable: true });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("rejects with the caller's abort reason", async () => {
    const controller = new AbortController();
    controller.abort(new Error("shutting down"));
    await expect(clientFor(aux).postMetrics(report(91), controller.signal)).rejects.toThrow("shutting down");
  });
});

describe("AuxPlatformClient with a base path and unexpected answers", () => {
  function answering(response: () => Response, seen: URL[] = []): typeof fetch {
    return (input) => {
      seen.push(new URL(requestUrl(input)));
      return Promise.resolve(response());
    };
  }

  it("builds URLs under the server's base path and signs the final path and query", async () => {
    const seen: URL[] = [];
    const scopes: string[] = [];
    const bodies: { streamed: boolean; type: string | null; length: string | null }[] = [];
    const fetchUnderPrefix: typeof fetch = (input, init) => {
      seen.push(new URL(requestUrl(input)));
      const token = new Headers(init?.headers).get("authorization")?.replace(/^Barnraise /, "") ?? "";
      const payload = JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString()) as {
        scope: string;
      };
      scopes.push(payload.scope);
      bodies.push({
        streamed: init?.body instanceof ReadableStream,
        type: new Headers(init?.headers).get("content-type"),
        length: new Headers(init?.headers).get("content-length"),
      });
      return Promise.resolve(
        Response.json({ ok: true, unknownPeers: 0, stored: true, timeline: 0, lastStep: 3 }),
      );
    };
    const client = clientFor(aux, {
      server: new URL("https://platform.example/barnraise?ignored=1"),
      experimentId: "exp one",
      fetch: fetchUnderPrefix,
    });
    await client.postMetrics(report(1));
    const file = await checkpointFile("prefixed.ckpt", randomBytes(10));
    await expect(
      client.uploadCheckpoint({ ...file, sizeBytes: 10 }, { step: 3, loss: 1e-7 }),
    ).rejects.toMatchObject({
      code: "BAD_RESPONSE",
    });

    expect(seen.map((url) => url.href)).toEqual([
      "https://platform.example/barnraise/api/v1/experiments/exp%20one/metrics",
      "https://platform.example/barnraise/api/v1/experiments/exp%20one/checkpoints?step=3&loss=1e-7&sizeBytes=10",
    ]);
    expect(scopes).toEqual([
      "POST /barnraise/api/v1/experiments/exp%20one/metrics",
      "POST /barnraise/api/v1/experiments/exp%20one/checkpoints?step=3&loss=1e-7&sizeBytes=10",
    ]);
    expect(bodies).toEqual([
      { streamed: false, type: "application/json", length: null },
      { streamed: true, type: "application/octet-stream", length: "10" },
    ]);
  });

  it("treats an answer that is not the route's as BAD_RESPONSE, retryable only for 5xx", async () => {
    const html = () =>
      new Response("<html>proxy</html>", { status: 200, headers: { "content-type": "text/html" } });
    const notJson = await refusal(clientFor(aux, { fetch: answering(html) }).postMetrics(report(1)));
    expect(notJson).toMatchObject({ code: "BAD_RESPONSE", status: 200, retryable: false });

    const wrongShape = await refusal(
      clientFor(aux, { fetch: answering(() => Response.json({ ok: true })) }).postMetrics(report(1)),
    );
    expect(wrongShape).toMatchObject({ code: "BAD_RESPONSE", retryable: false });
    expect(wrongShape.message).toContain("unknownPeers");

    const gateway = () => new Response("Bad Gateway", { status: 502 });
    const bad = await refusal(clientFor(aux, { fetch: answering(gateway) }).registerAddress(["/x"]));
    expect(bad).toMatchObject({ code: "BAD_RESPONSE", status: 502, retryable: true });

    const limited = () =>
      Response.json({ error: { code: "RATE_LIMITED", message: "slow down" } }, { status: 429 });
    const slow = await refusal(clientFor(aux, { fetch: answering(limited) }).registerAddress(["/x"]));
    expect(slow).toMatchObject({ code: "RATE_LIMITED", status: 429, retryable: true });

    const redirect = () =>
      new Response(null, { status: 307, headers: { location: "https://elsewhere.example/" } });
    const moved = await refusal(clientFor(aux, { fetch: answering(redirect) }).registerAddress(["/x"]));
    expect(moved).toMatchObject({ code: "BAD_RESPONSE", status: 307, retryable: false });
    expect(moved.message).toContain("redirects");
  });

  it("refuses an answer larger than MAX_RESPONSE_BYTES, valid or not, without reading all of it", async () => {
    // A well-formed answer padded to four times the bound, sent in 16 KiB chunks.
    const chunks = [
      '{"ok":true,"unknownPeers":0,"padding":"',
      ...Array.from({ length: (4 * MAX_RESPONSE_BYTES) / (16 * 1024) }, () => "x".repeat(16 * 1024)),
      '"}',
    ];
    let pulled = 0;
    const padded = () =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            const chunk = chunks[pulled];
            pulled += 1;
            if (chunk === undefined) controller.close();
            else controller.enqueue(new TextEncoder().encode(chunk));
          },
        }),
        { status: 200 },
      );
    const error = await refusal(clientFor(aux, { fetch: answering(padded) }).postMetrics(report(1)));
    expect(error).toMatchObject({ code: "BAD_RESPONSE", status: 200, retryable: false });
    expect(pulled).toBeLessThan(chunks.length / 2);
  });
});
