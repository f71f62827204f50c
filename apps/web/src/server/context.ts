import { createDatabase, type Database } from "@barnraise/prisma";
import type { CryptoProvider } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { loadServerEnv, type ServerEnv } from "./env.ts";
import { createLogger, type Logger } from "./logger.ts";
import { RateLimits } from "./http/rate-limit.ts";
import { Lookups } from "./lookups.ts";
import { MetricsIngestion } from "./metrics-ingestion.ts";
import { PeerVerifierCache } from "./peer-verifier-cache.ts";
import type { ObjectStore } from "./storage/object-store.ts";
import { openObjectStore } from "./storage/open-object-store.ts";
import { instrumentDatabase } from "./observability/instrument-database.ts";
import { PlatformMetrics } from "./observability/platform-metrics.ts";
import { createSmtpMailer, type Mailer } from "./alerts/mailer.ts";

/**
 * Everything a use case needs, built once per process from the environment. Use cases and routes
 * receive it rather than importing singletons, so tests and scripts build their own on any database.
 */
export interface AppContext {
  readonly env: ServerEnv;
  readonly db: Database;
  readonly crypto: CryptoProvider;
  readonly logger: Logger;
  /** Unix time in milliseconds. */
  readonly now: () => number;
  /**
   * Checkpoints, uploaded models and dataset shards: the data directory by default, an S3-compatible
   * store with `BARNRAISE_STORAGE_URL`.
   */
  readonly storage: ObjectStore;
  /** Group-committed reads of experiments and nodes, which every signed request makes. */
  readonly lookups: Lookups;
  /** The group-committed writer of the aux peers' metric reports. */
  readonly ingestion: MetricsIngestion;
  /** Verifiers of peer-signed requests, one per experiment key, and their shared replay guard. */
  readonly peerVerifiers: PeerVerifierCache;
  /** The Prometheus metrics `GET /metrics` serves. */
  readonly metrics: PlatformMetrics;
  /** Per-client rate limits, counted in the database so that every web instance shares them. */
  readonly rateLimits: RateLimits;
  /** Alert e-mail through BARNRAISE_SMTP_URL; null when no SMTP server is configured. */
  readonly mailer: Mailer | null;
}

export interface AppContextOverrides {
  db?: Database;
  logger?: Logger;
  now?: () => number;
  storage?: ObjectStore;
  mailer?: Mailer | null;
}

export function createAppContext(env: ServerEnv, overrides: AppContextOverrides = {}): AppContext {
  const metrics = new PlatformMetrics();
  const db = instrumentDatabase(overrides.db ?? createDatabase(env.databaseUrl), metrics);
  const now = overrides.now ?? Date.now;
  const logger = overrides.logger ?? createLogger(env.logLevel);
  return {
    env,
    db,
    metrics,
    crypto: nodeCrypto,
    logger,
    now,
    storage: overrides.storage ?? openObjectStore(env),
    lookups: new Lookups(db),
    ingestion: new MetricsIngestion(db, now, logger),
    peerVerifiers: new PeerVerifierCache(db, nodeCrypto, now),
    rateLimits: new RateLimits(db),
    mailer:
      overrides.mailer !== undefined
        ? overrides.mailer
        : env.smtp === undefined
          ? null
          : createSmtpMailer(env.smtp),
  };
}

// One context per process, kept on globalThis so that Next's module reloading in development
// does not open a new database pool each time.
const holder = globalThis as typeof globalThis & { __barnraiseAppContext?: AppContext };

export function getAppContext(): AppContext {
  holder.__barnraiseAppContext ??= createAppContext(loadServerEnv());
  return holder.__barnraiseAppContext;
}

/** Replaces the process's context: for tests and command-line scripts that bring their own. */
export function installAppContext(context: AppContext | undefined): void {
  holder.__barnraiseAppContext = context;
}
