import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encode } from "@auth/core/jwt";
import type { Database, DatabaseProvider } from "@barnraise/prisma";
import { openMigratedTestDatabase } from "@barnraise/prisma/testing";
import { inject } from "vitest";
import { createAppContext, installAppContext, type AppContext } from "../../src/server/context.ts";
import { loadServerEnv } from "../../src/server/env.ts";

/**
 * A platform on a throwaway, migrated database, installed as the process's app context, so route
 * handlers can be called directly with real Requests: real sessions, real database, real crypto.
 */

export const TEST_ORIGIN = "http://localhost:3000";
export const TEST_AUTH_SECRET = "test-auth-secret-0123456789abcdef0123456789";
export const TEST_SEALING_SECRET = "test-sealing-secret-0123456789abcdef01234567";

export interface TestApp {
  readonly ctx: AppContext;
  readonly db: Database;
  readonly dataDir: string;
  dispose(): Promise<void>;
}

export interface TestAppOptions {
  env?: Record<string, string>;
  now?: () => number;
}

export async function createTestApp(
  provider: DatabaseProvider,
  options: TestAppOptions = {},
): Promise<TestApp> {
  const database = await openMigratedTestDatabase(provider, inject("testDatabaseTemplates"));
  const dataDir = await mkdtemp(join(tmpdir(), "barnraise-web-"));
  const env = loadServerEnv({
    NODE_ENV: "test",
    AUTH_SECRET: TEST_AUTH_SECRET,
    BARNRAISE_SECRET: TEST_SEALING_SECRET,
    DATABASE_URL: database.url,
    BARNRAISE_DATA_DIR: dataDir,
    LOG_LEVEL: "silent",
    ...options.env,
  });
  const ctx = createAppContext(env, options.now ? { now: options.now } : {});
  installAppContext(ctx);
  return {
    ctx,
    db: ctx.db,
    dataDir,
    async dispose() {
      installAppContext(undefined);
      await ctx.db.$disconnect();
      await database.dispose();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The Cookie header of a signed-in user, minted the way Auth.js mints its session cookie. */
export async function sessionCookie(user: { id: string; username: string }): Promise<string> {
  const name = "authjs.session-token";
  const token = await encode({
    token: { sub: user.id, username: user.username },
    secret: TEST_AUTH_SECRET,
    salt: name,
  });
  return `${name}=${token}`;
}

type RouteHandler<P> = (req: Request, context: { params: Promise<P> }) => Promise<Response>;

export interface CallInit<P> {
  method?: string;
  params?: P;
  /** Sent as JSON unless it is already a string, bytes or a stream. */
  body?: unknown;
  cookie?: string;
  headers?: Record<string, string>;
}

/** Calls a route handler as Next would, from the platform's own origin unless `headers.origin` says otherwise. */
export function callRoute<P>(
  handler: RouteHandler<P>,
  path: string,
  init: CallInit<P> = {},
): Promise<Response> {
  const method = init.method ?? "GET";
  const headers = new Headers(init.headers);
  if (init.cookie !== undefined) headers.set("cookie", init.cookie);
  if (method !== "GET" && method !== "HEAD" && !headers.has("origin")) headers.set("origin", TEST_ORIGIN);
  let body: BodyInit | undefined;
  if (init.body !== undefined) {
    if (
      typeof init.body === "string" ||
      init.body instanceof Uint8Array ||
      init.body instanceof ReadableStream
    ) {
      body = init.body as BodyInit;
    } else {
      body = JSON.stringify(init.body);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    }
  }
  const request = new Request(new URL(path, TEST_ORIGIN), {
    method,
    headers,
    ...(body !== undefined ? { body, duplex: "half" } : {}),
  });
  return handler(request, { params: Promise.resolve(init.params ?? ({} as P)) });
}
