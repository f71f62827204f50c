import { join } from "node:path";
import { createDatabase, type Database } from "@barnraise/prisma";
import type { CryptoProvider } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { loadServerEnv, type ServerEnv } from "./env.ts";
import { createLogger, type Logger } from "./logger.ts";
import { PeerVerifierCache } from "./peer-verifier-cache.ts";
import type { CheckpointStore } from "./storage/checkpoint-store.ts";
import { LocalCheckpointStore } from "./storage/local-checkpoint-store.ts";
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
  /** Checkpoint files; by default on local disk under `<data dir>/checkpoints`. */
  readonly checkpoints: CheckpointStore;
  /** Verifiers of peer-signed requests, one per experiment key, and their shared replay guard. */
  readonly peerVerifiers: PeerVerifierCache;
  /** The Prometheus metrics `GET /metrics` serves. */
  readonly metrics: PlatformMetrics;
  /** Alert e-mail through BARNRAISE_SMTP_URL; null when no SMTP server is configured. */
  readonly mailer: Mailer | null;
}

export interface AppContextOverrides {
  db?: Database;
  logger?: Logger;
  now?: () => number;
  checkpoints?: CheckpointStore;
  mailer?: Mailer | null;
}

export function createAppContext(env: ServerEnv, overrides: AppContextOverrides = {}): AppContext {
  const metrics = new PlatformMetrics();
  const db = instrumentDatabase(overrides.db ?? createDatabase(env.databaseUrl), metrics);
  return {
    env,
    db,
    metrics,
    crypto: nodeCrypto,
    logger: overrides.logger ?? createLogger(env.logLevel),
    now: overrides.now ?? Date.now,
    checkpoints: overrides.checkpoints ?? new LocalCheckpointStore(join(env.dataDir, "checkpoints")),
    peerVerifiers: new PeerVerifierCache(db, nodeCrypto),
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
