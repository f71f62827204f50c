import { once } from "node:events";
import { readdir } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { registerHooks } from "node:module";
import type { AddressInfo } from "node:net";
import { join, sep } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseExperimentConfig, PeerRole, type ExperimentConfigInput } from "@barnraise/protocol";
import type { DatabaseProvider } from "@barnraise/prisma";
import { NextRequest } from "next/server.js";
import type { RequestedOptions } from "../../src/server/datasets/dataset-source.ts";
import { prepareDatasets, type PrepareResult } from "../../src/server/datasets/prepare-datasets.ts";
import { createExperiment as createExperimentUseCase } from "../../src/server/services/create-experiment.ts";
import { createToken, createUser, setAllowlistStatus, type FixtureUser } from "./peer-fixtures.ts";
import { createTestApp, type TestApp } from "./test-app.ts";

/**
 * The platform served over real HTTP on 127.0.0.1, for tests whose clients are real processes (a
 * volunteer peer, an aux peer, a CLI). It serves every route handler under `app/api` the way the
 * Next.js server does for them, on a TestApp (throwaway database, installed app context), so no
 * `next build` is needed and a test starts a platform in about a second.
 *
 * What it copies from the Next.js server, because route handlers or their clients depend on it:
 * - the handler gets a NextRequest built from the server's own origin (NextRequest reports 127.0.0.1
 *   as `localhost` in `req.url`, as it does under `next start`) and its params as a Promise;
 * - `x-forwarded-host/port/proto/for` are filled in when absent, so the join rate limit keys on the
 *   client's address: every local process shares the budget of 127.0.0.1 (60 joins a minute);
 * - HEAD falls back to GET, OPTIONS answers 204 with `Allow`, a method not exported is 405 without a
 *   body, a trailing slash is a 308 redirect, a path no route file serves is an HTML 404;
 * - `content-length`, `content-encoding` and `transfer-encoding` are dropped from responses (bodies
 *   go out chunked, as Next.js 16 sends them), each Set-Cookie is sent as its own header;
 * - the request's signal aborts, and the response body is cancelled, when the client disconnects.
 * BARNRAISE_PUBLIC_URL is the server's origin, as an operator sets it, so join commands and
 * same-origin checks see the address clients use. The app has no middleware (`proxy.ts`), so
 * nothing else stands in front of the handlers.
 *
 * The app context is process-wide (see context.ts), so a process runs one platform at a time.
 */

const APP_DIR = fileURLToPath(new URL("../../app/", import.meta.url));

export interface PlatformServerOptions {
  readonly provider?: DatabaseProvider;
  /** Datasets to prepare before the platform is handed out; a small `limit` keeps this under a second. */
  readonly datasets?: { readonly names: readonly string[] } & RequestedOptions;
  /** The platform's clock (`ctx.now`: pass issue and expiry, last-seen times); real time by default. */
  readonly now?: () => number;
  /** More of the platform's environment, e.g. BARNRAISE_PROGRAMS_DIR. */
  readonly env?: Readonly<Record<string, string>>;
}

export interface ExperimentOptions {
  readonly id?: string;
  readonly name?: string;
  /** The organizer; a new user by default. */
  readonly organizer?: FixtureUser;
  readonly status?: "running" | "paused";
}

export interface PlatformServer {
  /** The origin, e.g. `http://127.0.0.1:41234/`: what a peer gets as `--server`. */
  readonly url: URL;
  readonly app: TestApp;
  /** The prepared datasets, with their manifests. */
  readonly datasets: readonly PrepareResult[];
  /** The served route patterns, e.g. `/api/v1/experiments/[id]/join`. */
  readonly routes: readonly string[];
  /**
   * Errors thrown by handlers (answered 500) or while sending a response. The app logs nothing in
   * tests, so a test that sees a 500 can look here.
   */
  readonly errors: readonly unknown[];
  /** An experiment created as the organizer's POST creates it; `config` is any subset, defaults applied. */
  createExperiment(
    config?: ExperimentConfigInput,
    options?: ExperimentOptions,
  ): Promise<{ id: string; organizer: FixtureUser }>;
  /** An approved volunteer (a new user unless `username` exists) and a fresh trainer token (the secret). */
  addVolunteer(experimentId: string, username?: string): Promise<{ user: FixtureUser; token: string }>;
  /** A fresh aux token of the experiment's organizer (the secret), for an aux peer. */
  createAuxToken(experimentId: string): Promise<string>;
  /** Bans the user from the experiment: their next join or pass refresh is refused. */
  ban(experimentId: string, username: string): Promise<void>;
  /** Stops listening, drops open connections, waits for handlers in flight, then disposes the app. */
  close(): Promise<void>;
}

export async function startPlatformServer(options: PlatformServerOptions = {}): Promise<PlatformServer> {
  // Listen before the app exists: its public URL must be the origin, known only once listening.
  // Nothing can call the server before this function returns its URL.
  const http = await serveRoutes(await loadRoutes(APP_DIR));
  let app: TestApp | undefined;
  let datasets: PrepareResult[] = [];
  try {
    app = await createTestApp(options.provider ?? "sqlite", {
      env: { ...options.env, BARNRAISE_PUBLIC_URL: http.url.origin },
      ...(options.now ? { now: options.now } : {}),
    });
    if (options.datasets !== undefined) {
      const { names, ...requested } = options.datasets;
      datasets = await prepareDatasets({ ...requested, storage: app.ctx.storage, datasets: names });
    }
  } catch (error) {
    await http.close();
    await app?.dispose();
    throw error;
  }
  const ready = app;

  let closing: Promise<void> | undefined;
  let counter = 0;
  return {
    url: http.url,
    app: ready,
    datasets,
    routes: http.routes.map((route) => route.pattern),
    errors: http.errors,
    async createExperiment(config = {}, experiment = {}) {
      counter += 1;
      const organizer = experiment.organizer ?? (await createUser(ready));
      const created = await createExperimentUseCase(ready.ctx, organizer, {
        id: experiment.id ?? `exp-${counter}`,
        name: experiment.name ?? `Experiment ${counter}`,
        config: parseExperimentConfig(config),
      });
      if (experiment.status === "paused") {
        await ready.db.experiment.update({ where: { id: created.id }, data: { status: "paused" } });
      }
      return { id: created.id, organizer };
    },
    async addVolunteer(experimentId, username) {
      const user = await findOrCreateUser(ready, username);
      await setAllowlistStatus(ready, experimentId, user, "approved");
      const token = await createToken(ready, experimentId, user, PeerRole.trainer);
      return { user, token: token.token };
    },
    async createAuxToken(experimentId) {
      const experiment = await ready.db.experiment.findUniqueOrThrow({
        where: { id: experimentId },
        select: { organizer: { select: { id: true, username: true } } },
      });
      return (await createToken(ready, experimentId, experiment.organizer, PeerRole.aux)).token;
    },
    async ban(experimentId, username) {
      const user = await ready.db.user.findUniqueOrThrow({
        where: { username },
        select: { id: true, username: true },
      });
      await setAllowlistStatus(ready, experimentId, user, "banned");
    },
    close() {
      closing ??= (async () => {
        await http.close();
        await ready.dispose();
      })();
      return closing;
    },
  };
}

async function findOrCreateUser(app: TestApp, username: string | undefined): Promise<FixtureUser> {
  if (username === undefined) return createUser(app);
  const found = await app.db.user.findUnique({ where: { username }, select: { id: true, username: true } });
  return found ?? createUser(app, username);
}

// ---------------------------------------------------------------------------------------------
// Routes: the app directory's route files, matched as the App Router matches them.

export const HTTP_METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

export type RouteParams = Record<string, string | string[]>;
export type RouteHandler = (
  req: Request,
  context: { params: Promise<RouteParams> },
) => Response | Promise<Response>;

export type RouteSegment =
  | { readonly kind: "static"; readonly value: string }
  | { readonly kind: "dynamic"; readonly name: string }
  | { readonly kind: "catch-all"; readonly name: string }
  | { readonly kind: "optional-catch-all"; readonly name: string };

export interface Route {
  /** The URL pattern in the app directory's notation, e.g. `/api/v1/datasets/[name]`. */
  readonly pattern: string;
  readonly segments: readonly RouteSegment[];
  readonly handlers: ReadonlyMap<HttpMethod, RouteHandler>;
}

export class RouteFileError extends Error {
  override readonly name = "RouteFileError";
}

/** Finds and imports every `route.ts` under `<appDir>/api` (private `_folders` excluded). */
export async function loadRoutes(appDir: string): Promise<Route[]> {
  resolveNextSubpathsLikeBundlers();
  const files = (await readdir(join(appDir, "api"), { recursive: true }))
    .map((file) => file.split(sep))
    .filter((parts) => parts.at(-1) === "route.ts" && !parts.some((part) => part.startsWith("_")));
  const routes: Route[] = [];
  for (const parts of files) {
    const folders = ["api", ...parts.slice(0, -1)];
    const module: unknown = await import(pathToFileURL(join(appDir, ...folders, "route.ts")).href);
    routes.push(defineRoute(folders, module as Record<string, unknown>));
  }
  return routes.sort((a, b) => a.pattern.localeCompare(b.pattern));
}

/** The route of a `route.ts` in `folders` (relative to the app directory) exporting `module`. */
export function defineRoute(folders: readonly string[], module: Readonly<Record<string, unknown>>): Route {
  const segments = routeSegments(folders);
  return {
    pattern: `/${segments.map(formatSegment).join("/")}`,
    segments,
    handlers: routeHandlers(module),
  };
}

const hooks = globalThis as typeof globalThis & { __barnraiseNextSubpathHook?: boolean };

/**
 * next-auth imports `next/server`, a subpath of a package without an `exports` map, without its file
 * extension. Next.js bundles route handlers, and its bundler resolves that; Node's ESM loader, which
 * loads next-auth here, does not. This resolves such `next/<name>` specifiers to `next/<name>.js`,
 * once per process.
 */
function resolveNextSubpathsLikeBundlers(): void {
  if (hooks.__barnraiseNextSubpathHook === true) return;
  hooks.__barnraiseNextSubpathHook = true;
  registerHooks({
    resolve(specifier, context, nextResolve) {
      if (/^next\/[a-z-]+$/.test(specifier)) return nextResolve(`${specifier}.js`, context);
      return nextResolve(specifier, context);
    },
  });
}

/** The URL segments of a route's folders: `(groups)` vanish, `[x]`, `[...x]`, `[[...x]]` are params. */
export function routeSegments(folders: readonly string[]): RouteSegment[] {
  const segments: RouteSegment[] = [];
  for (const folder of folders) {
    if (/^\(.+\)$/.test(folder)) continue;
    if (folder.startsWith("@")) throw new RouteFileError(`parallel routes are not served: ${folder}`);
    const optional = /^\[\[\.\.\.(.+)\]\]$/.exec(folder)?.[1];
    const catchAll = /^\[\.\.\.(.+)\]$/.exec(folder)?.[1];
    const dynamic = /^\[(.+)\]$/.exec(folder)?.[1];
    if (segments.at(-1)?.kind.endsWith("catch-all") === true) {
      throw new RouteFileError(`a catch-all segment must be the last one: ${folders.join("/")}`);
    }
    if (optional !== undefined) segments.push({ kind: "optional-catch-all", name: optional });
    else if (catchAll !== undefined) segments.push({ kind: "catch-all", name: catchAll });
    else if (dynamic !== undefined) segments.push({ kind: "dynamic", name: dynamic });
    else segments.push({ kind: "static", value: folder });
  }
  return segments;
}

function formatSegment(segment: RouteSegment): string {
  switch (segment.kind) {
    case "static":
      return segment.value;
    case "dynamic":
      return `[${segment.name}]`;
    case "catch-all":
      return `[...${segment.name}]`;
    case "optional-catch-all":
      return `[[...${segment.name}]]`;
  }
}

/** The module's method exports, with HEAD and OPTIONS filled in as Next.js fills them in. */
function routeHandlers(module: Readonly<Record<string, unknown>>): Map<HttpMethod, RouteHandler> {
  const handlers = new Map<HttpMethod, RouteHandler>();
  for (const method of HTTP_METHODS) {
    const handler = module[method];
    if (typeof handler === "function") handlers.set(method, handler as RouteHandler);
  }
  const get = handlers.get("GET");
  if (!handlers.has("HEAD") && get !== undefined) handlers.set("HEAD", get);
  if (!handlers.has("OPTIONS")) {
    const allow = ["OPTIONS", ...handlers.keys()].sort().join(", ");
    handlers.set("OPTIONS", () => new Response(null, { status: 204, headers: { allow } }));
  }
  return handlers;
}

const segmentRank: Record<RouteSegment["kind"], number> = {
  static: 0,
  dynamic: 1,
  "catch-all": 2,
  "optional-catch-all": 3,
};

/**
 * The route for the decoded path segments and its params, or undefined. Of several matches the most
 * specific wins, segment by segment: static, then `[x]`, then `[...x]`, then `[[...x]]`.
 */
export function matchRoute(
  routes: readonly Route[],
  parts: readonly string[],
): { route: Route; params: RouteParams } | undefined {
  let best: { route: Route; params: RouteParams } | undefined;
  for (const route of routes) {
    const params = matchSegments(route.segments, parts);
    if (params !== undefined && (best === undefined || moreSpecific(route, best.route))) {
      best = { route, params };
    }
  }
  return best;
}

function matchSegments(segments: readonly RouteSegment[], parts: readonly string[]): RouteParams | undefined {
  const params: RouteParams = {};
  for (const [index, segment] of segments.entries()) {
    const part = parts[index];
    switch (segment.kind) {
      case "static":
        if (part !== segment.value) return undefined;
        break;
      case "dynamic":
        if (part === undefined) return undefined;
        params[segment.name] = part;
        break;
      case "catch-all":
        if (part === undefined) return undefined;
        params[segment.name] = parts.slice(index);
        return params;
      case "optional-catch-all":
        if (part !== undefined) params[segment.name] = parts.slice(index);
        return params;
    }
  }
  return parts.length === segments.length ? params : undefined;
}

function moreSpecific(a: Route, b: Route): boolean {
  const length = Math.max(a.segments.length, b.segments.length);
  for (let index = 0; index < length; index += 1) {
    const rankA = rankAt(a, index);
    const rankB = rankAt(b, index);
    if (rankA !== rankB) return rankA < rankB;
  }
  return false;
}

function rankAt(route: Route, index: number): number {
  const segment = route.segments[index];
  return segment === undefined ? Number.POSITIVE_INFINITY : segmentRank[segment.kind];
}

// ---------------------------------------------------------------------------------------------
// HTTP: node request → NextRequest → route handler → Response → node response.

export interface RouteServer {
  /** `http://127.0.0.1:<port>/`. */
  readonly url: URL;
  readonly routes: readonly Route[];
  /** Errors thrown by handlers (answered 500) or while sending a response. */
  readonly errors: readonly unknown[];
  /** Stops listening, drops open connections (fetch keeps idle ones alive), waits for handlers in flight. */
  close(): Promise<void>;
}

/** Serves `routes` on 127.0.0.1 at an ephemeral port, as the Next.js server serves route handlers. */
export async function serveRoutes(routes: readonly Route[]): Promise<RouteServer> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const url = new URL(`http://127.0.0.1:${port}/`);
  const errors: unknown[] = [];
  const inFlight = new Set<Promise<void>>();
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    const handled = serve(routes, url, req, res, errors).catch((error: unknown) => {
      errors.push(error);
      res.destroy();
    });
    inFlight.add(handled);
    void handled.finally(() => inFlight.delete(handled));
  });
  let closing: Promise<void> | undefined;
  return {
    url,
    routes,
    errors,
    close() {
      closing ??= (async () => {
        const closed = once(server, "close");
        server.close();
        server.closeAllConnections();
        await Promise.allSettled([...inFlight]);
        await closed;
      })();
      return closing;
    },
  };
}

/** Response headers the Next.js server does not forward (the body may be re-encoded on the way). */
const DROPPED_RESPONSE_HEADERS = new Set(["content-length", "content-encoding", "transfer-encoding"]);

async function serve(
  routes: readonly Route[],
  origin: URL,
  req: IncomingMessage,
  res: ServerResponse,
  errors: unknown[],
): Promise<void> {
  const target = new URL(req.url ?? "/", origin);
  // Next.js redirects a trailing slash or repeated slashes to the normalized path.
  const normalized = target.pathname.replace(/\/{2,}/g, "/").replace(/(.)\/$/, "$1");
  if (normalized !== target.pathname) {
    res.writeHead(308, { location: `${normalized}${target.search}` }).end();
    return;
  }
  let parts: string[];
  try {
    parts = target.pathname.split("/").slice(1).map(decodeURIComponent);
  } catch {
    res.writeHead(400, { "content-type": "text/plain; charset=utf-8" }).end("Bad Request");
    return;
  }
  const found = matchRoute(routes, parts);
  if (found === undefined) {
    res.writeHead(404, { "content-type": "text/html; charset=utf-8" });
    res.end("<!DOCTYPE html><title>404: This page could not be found.</title>");
    return;
  }
  const method = (req.method ?? "GET").toUpperCase();
  const handler = found.route.handlers.get(method as HttpMethod);
  if (handler === undefined) {
    res.writeHead(405).end();
    return;
  }

  const disconnected = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) disconnected.abort(new Error("the client disconnected"));
  });
  const request = toNextRequest(req, target, method, disconnected.signal);
  let response: Response;
  try {
    response = await handler(request, { params: Promise.resolve(found.params) });
  } catch (error) {
    // Next.js logs the error and answers 500 without details.
    errors.push(error);
    res.writeHead(500).end();
    return;
  }
  await sendResponse(res, method, response);
}

function toNextRequest(req: IncomingMessage, url: URL, method: string, signal: AbortSignal): NextRequest {
  const headers = new Headers();
  for (let index = 0; index + 1 < req.rawHeaders.length; index += 2) {
    const name = req.rawHeaders[index];
    const value = req.rawHeaders[index + 1];
    if (name !== undefined && value !== undefined) headers.append(name, value);
  }
  // Filled in as the Next.js server fills them in when no proxy set them.
  const forwarded: Record<string, string | undefined> = {
    "x-forwarded-host": headers.get("host") ?? url.host,
    "x-forwarded-port": url.port,
    "x-forwarded-proto": "http",
    "x-forwarded-for": req.socket.remoteAddress,
  };
  for (const [name, value] of Object.entries(forwarded)) {
    if (value !== undefined && !headers.has(name)) headers.set(name, value);
  }
  const hasBody = method !== "GET" && method !== "HEAD";
  return new NextRequest(url, {
    method,
    headers,
    signal,
    ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: "half" } : {}),
  });
}

async function sendResponse(res: ServerResponse, method: string, response: Response): Promise<void> {
  res.statusCode = response.status;
  if (response.statusText !== "") res.statusMessage = response.statusText;
  response.headers.forEach((value, name) => {
    if (!DROPPED_RESPONSE_HEADERS.has(name) && name !== "set-cookie") res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader("set-cookie", cookies);

  const body = response.body;
  if (body === null || method === "HEAD") {
    await body?.cancel();
    res.end();
    return;
  }
  try {
    // When the client goes away, pipeline destroys the readable, which cancels the web stream.
    await pipeline(Readable.fromWeb(body as NodeReadableStream<Uint8Array>), res);
  } catch (error) {
    if (!res.destroyed) throw error;
  }
}
