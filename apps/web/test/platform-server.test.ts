import { createHash } from "node:crypto";
import { encodePublicKey, generateKeyPair, parseExperimentConfig } from "@barnraise/protocol";
// The join client's own module: the swarm package's entry needs a newer `lib` than this app's tsconfig.
import { joinPlatform, peerToken } from "../../../packages/swarm/src/platform/join-client.ts";
import { isJoinError, JoinErrorCode } from "../../../packages/swarm/src/platform/join-error.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DatasetManifest } from "../src/api/schemas/datasets.ts";
import { createToken, createUser, errorCode } from "./support/peer-fixtures.ts";
import {
  defineRoute,
  matchRoute,
  serveRoutes,
  startPlatformServer,
  type PlatformServer,
  type RouteHandler,
  type RouteServer,
} from "./support/platform-server.ts";
import { sessionCookie } from "./support/test-app.ts";

describe("route matching", () => {
  const routes = [
    defineRoute(["api", "items", "[id]"], {}),
    defineRoute(["api", "items", "new"], {}),
    defineRoute(["api", "items", "[...rest]"], {}),
    defineRoute(["api", "(group)", "docs", "[[...path]]"], {}),
  ];
  const match = (path: string) => {
    const found = matchRoute(routes, path.split("/").slice(1));
    return found && { pattern: found.route.pattern, params: found.params };
  };

  it("prefers a static segment, then a dynamic one, then a catch-all", () => {
    expect(match("/api/items/new")).toEqual({ pattern: "/api/items/new", params: {} });
    expect(match("/api/items/7")).toEqual({ pattern: "/api/items/[id]", params: { id: "7" } });
    expect(match("/api/items/7/parts")).toEqual({
      pattern: "/api/items/[...rest]",
      params: { rest: ["7", "parts"] },
    });
    expect(match("/api/items")).toBeUndefined();
  });

  it("drops route groups and lets an optional catch-all match nothing", () => {
    expect(match("/api/docs")).toEqual({ pattern: "/api/docs/[[...path]]", params: {} });
    expect(match("/api/docs/a/b")?.params).toEqual({ path: ["a", "b"] });
    expect(match("/api/group/docs")).toBeUndefined();
  });
});

describe("serving route handlers over HTTP", () => {
  let server: RouteServer;
  let disconnected: { signal: Promise<void>; cancel: Promise<void> };

  const echo: RouteHandler = async (req, { params }) =>
    Response.json({
      url: req.url,
      params: await params,
      forwardedFor: req.headers.get("x-forwarded-for"),
      forwardedHost: req.headers.get("x-forwarded-host"),
      body: req.method === "POST" ? await req.text() : null,
    });
  const cookies: RouteHandler = () => {
    const headers = new Headers({ "content-length": "2" });
    headers.append("set-cookie", "a=1; Path=/");
    headers.append("set-cookie", "b=2; Path=/; HttpOnly");
    return new Response("ok", { headers });
  };
  const endless: RouteHandler = (req) => {
    let cancelled: () => void = () => undefined;
    const cancel = new Promise<void>((resolve) => {
      cancelled = resolve;
    });
    const signal = new Promise<void>((resolve) => {
      req.signal.addEventListener("abort", () => {
        resolve();
      });
    });
    disconnected = { signal, cancel };
    const chunk = new Uint8Array(64 * 1024);
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(chunk);
      },
      cancel() {
        cancelled();
      },
    });
    return new Response(body);
  };
  const failing: RouteHandler = () => {
    throw new Error("handler bug");
  };

  beforeAll(async () => {
    server = await serveRoutes([
      defineRoute(["api", "echo", "[name]", "[...rest]"], { GET: echo, POST: echo }),
      defineRoute(["api", "cookies"], { GET: cookies }),
      defineRoute(["api", "endless"], { GET: endless }),
      defineRoute(["api", "failing"], { GET: failing }),
    ]);
  });
  afterAll(() => server.close());

  const call = (path: string, init?: RequestInit) => fetch(new URL(path, server.url), init);

  it("passes decoded params and the headers the Next.js server adds", async () => {
    const res = await call("/api/echo/a%20b/c/d%2Fe?q=1");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      // NextRequest reports loopback hosts as localhost, as it does under `next start`.
      url: `http://localhost:${server.url.port}/api/echo/a%20b/c/d%2Fe?q=1`,
      params: { name: "a b", rest: ["c", "d/e"] },
      forwardedFor: "127.0.0.1",
      forwardedHost: server.url.host,
      body: null,
    });
  });

  it("streams a request body to the handler", async () => {
    const encoder = new TextEncoder();
    const upload = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode("first,"));
        controller.enqueue(encoder.encode("second"));
        controller.close();
      },
    });
    const res = await call("/api/echo/x/y", { method: "POST", body: upload, duplex: "half" } as RequestInit);
    expect(((await res.json()) as { body: string }).body).toBe("first,second");
  });

  it("sends every Set-Cookie and drops Content-Length as Next.js does; HEAD has no body", async () => {
    const res = await call("/api/cookies");
    expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; Path=/; HttpOnly"]);
    expect(res.headers.get("content-length")).toBeNull();
    expect(await res.text()).toBe("ok");

    const head = await call("/api/cookies", { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.getSetCookie()).toHaveLength(2);
    expect(await head.text()).toBe("");
  });

  it("aborts the request's signal and cancels the response body when the client goes away", async () => {
    const client = new AbortController();
    const res = await call("/api/endless", { signal: client.signal });
    const reader = res.body?.getReader();
    expect((await reader?.read())?.done).toBe(false);
    client.abort();
    await Promise.all([disconnected.signal, disconnected.cancel]);
  });

  it("answers 500 for a handler that throws, and keeps the error", async () => {
    const res = await call("/api/failing");
    expect(res.status).toBe(500);
    expect(await res.text()).toBe("");
    expect(server.errors).toEqual([expect.objectContaining({ message: "handler bug" })]);
  });

  it("answers 404 for no route, 405 for a missing method, OPTIONS with Allow, 308 for a trailing slash", async () => {
    expect((await call("/api/nothing")).status).toBe(404);
    expect((await call("/api/cookies", { method: "DELETE" })).status).toBe(405);
    const options = await call("/api/echo/a/b", { method: "OPTIONS" });
    expect(options.status).toBe(204);
    expect(options.headers.get("allow")).toBe("GET, HEAD, OPTIONS, POST");
    const slash = await call("/api/cookies/?x=1", { redirect: "manual" });
    expect(slash.status).toBe(308);
    expect(slash.headers.get("location")).toBe("/api/cookies?x=1");
  });
});

describe("the platform over HTTP", () => {
  let platform: PlatformServer;
  let mnist: DatasetManifest;
  const config = { training: { targetBatchSize: 64 } };
  let experimentId: string;

  beforeAll(async () => {
    // 100 is the smallest MNIST subset with both splits (every tenth sample of a digit is a test sample).
    platform = await startPlatformServer({ datasets: { names: ["mnist"], limit: 100, recordsPerShard: 50 } });
    const res = await get("/api/v1/datasets/mnist");
    expect(res.status).toBe(200);
    mnist = (await res.json()) as DatasetManifest;
    experimentId = (await platform.createExperiment(config)).id;
  }, 30_000);

  afterAll(() => platform.close());

  const get = (path: string, init?: RequestInit) => fetch(new URL(path, platform.url), init);
  const postJoin = (token: string) =>
    get("/api/v1/join", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token, publicKey: encodePublicKey(generateKeyPair().publicKey) }),
    });

  it("serves every route file of the app, with its own origin as the public URL", () => {
    expect(platform.url.hostname).toBe("127.0.0.1");
    expect(platform.app.ctx.env.publicUrl).toBe(platform.url.origin);
    expect(platform.routes).toEqual(
      expect.arrayContaining([
        "/api/auth/[...nextauth]",
        "/api/v1/health",
        "/api/v1/join",
        "/api/v1/datasets/[name]/shards/[file]",
        "/api/v1/experiments/[id]/allowlist/[username]",
      ]),
    );
  });

  it("answers the health check", async () => {
    const res = await get("/api/v1/health");
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "ok" });
  });

  it("serves the prepared manifest, and shards whose bytes match its sha256", async () => {
    expect(platform.datasets.map((dataset) => dataset.manifest)).toEqual([mnist]);
    expect(mnist.splits.train.records).toBeGreaterThan(0);
    expect(mnist.splits.test.records).toBeGreaterThan(0);
    for (const shard of mnist.shards) {
      const res = await get(`/api/v1/datasets/mnist/shards/${shard.file}`);
      expect(res.status).toBe(200);
      const bytes = new Uint8Array(await res.arrayBuffer());
      expect(bytes.byteLength).toBe(shard.bytes);
      expect(createHash("sha256").update(bytes).digest("hex")).toBe(shard.sha256);
    }
    const range = await get(`/api/v1/datasets/mnist/shards/${mnist.shards[0]?.file ?? ""}`, {
      headers: { range: "bytes=785-1569" },
    });
    expect(range.status).toBe(206);
    expect((await range.arrayBuffer()).byteLength).toBe(785);
  });

  it("admits a volunteer, and the peer's client verifies the served pass and config", async () => {
    const volunteer = await platform.addVolunteer(experimentId);
    const joined = await joinPlatform({
      server: platform.url,
      credential: peerToken(volunteer.token),
      keyPair: generateKeyPair(),
    });
    expect(joined.experiment.id).toBe(experimentId);
    expect(joined.pass.username).toBe(volunteer.user.username);
    expect(joined.config).toEqual(parseExperimentConfig(config));
    expect(platform.errors).toEqual([]);
  });

  it("refuses a user who is not on the allowlist with 403 NOT_ALLOWLISTED", async () => {
    const stranger = await createUser(platform.app);
    const token = await createToken(platform.app, experimentId, stranger);
    expect(await errorCode(await postJoin(token.token))).toEqual({ status: 403, code: "NOT_ALLOWLISTED" });
  });

  it("refuses a banned volunteer, also through the peer's client", async () => {
    const volunteer = await platform.addVolunteer(experimentId);
    expect((await postJoin(volunteer.token)).status).toBe(200);
    await platform.ban(experimentId, volunteer.user.username);
    expect(await errorCode(await postJoin(volunteer.token))).toEqual({ status: 403, code: "BANNED" });
    const refused = await joinPlatform({
      server: platform.url,
      credential: peerToken(volunteer.token),
      keyPair: generateKeyPair(),
    }).catch((error: unknown) => error);
    expect(isJoinError(refused, JoinErrorCode.BANNED)).toBe(true);
  });

  it("accepts a signed-in mutation from its own origin only", async () => {
    const cookie = await sessionCookie(await createUser(platform.app));
    const create = (id: string, headers: Record<string, string>) =>
      get("/api/v1/experiments", {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify({ id, name: id }),
      });
    expect((await create("anonymous", { origin: platform.url.origin })).status).toBe(401);
    expect((await create("same-origin", { origin: platform.url.origin, cookie })).status).toBe(201);
    expect(await errorCode(await create("cross-site", { origin: "http://localhost:3000", cookie }))).toEqual({
      status: 403,
      code: "CROSS_SITE_REQUEST",
    });
  });

  it("serves the Auth.js routes with their cookies", async () => {
    const res = await get("/api/auth/csrf");
    expect(res.status).toBe(200);
    expect(((await res.json()) as { csrfToken?: unknown }).csrfToken).toEqual(expect.any(String));
    expect(res.headers.getSetCookie().map((cookie) => cookie.split("=")[0])).toEqual([
      "authjs.csrf-token",
      "authjs.callback-url",
    ]);
  });

  it("answers 404 for a path no route file serves and 405 for a method it does not export", async () => {
    expect((await get("/api/v1/nothing-here")).status).toBe(404);
    expect((await get("/api/v1/health", { method: "DELETE" })).status).toBe(405);
  });
});
