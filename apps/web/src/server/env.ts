import { isAbsolute, resolve } from "node:path";
import { z } from "zod";

/**
 * The platform's environment, validated once at start-up (next.config.ts calls `loadServerEnv` when
 * the server starts), so a missing or weak secret stops the server with a clear message instead of
 * failing the first request that needs it.
 */

const secret = (name: string) =>
  z
    .string({ error: `${name} is required (generate one with: openssl rand -base64 32)` })
    .min(32, `${name} must be at least 32 characters (generate one with: openssl rand -base64 32)`);

const oidcProviderSchema = z.strictObject({
  /** Used in the callback URL: /api/auth/callback/<id>. */
  id: z.string().regex(/^[a-z0-9-]{1,32}$/, "must be 1-32 lowercase letters, digits or '-'"),
  name: z.string().min(1).max(64),
  issuer: z.url(),
  clientId: z.string().min(1),
  clientSecret: z.string().min(1),
});
export type OidcProviderConfig = z.infer<typeof oidcProviderSchema>;

const jsonList = <T extends z.ZodType>(item: T) =>
  z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: "must be a JSON array" });
        return z.NEVER;
      }
    })
    .pipe(z.array(item));

const commaList = z
  .string()
  .transform((text) => text.split(",").map((part) => part.trim()))
  .pipe(z.array(z.string()))
  .transform((parts) => parts.filter((part) => part.length > 0));

const envSchema = z.object({
  NODE_ENV: z.enum(["development", "production", "test"]).default("production"),
  /** Signs and encrypts Auth.js session cookies. */
  AUTH_SECRET: secret("AUTH_SECRET"),
  /** Encrypts the experiments' authority secret keys at rest. */
  BARNRAISE_SECRET: secret("BARNRAISE_SECRET"),
  /** Former BARNRAISE_SECRET values, comma-separated, still accepted for opening sealed keys. */
  BARNRAISE_PREVIOUS_SECRETS: commaList.optional(),
  /** `file:` (SQLite) or `postgresql://`; defaults to `<data dir>/barnraise.db`. */
  DATABASE_URL: z
    .string()
    .regex(/^(file:|postgres(ql)?:\/\/)/, "must start with file: (SQLite) or postgresql:// (PostgreSQL)")
    .optional(),
  /** Where checkpoints, dataset shards and the default SQLite file live. */
  BARNRAISE_DATA_DIR: z.string().min(1).default(".data"),
  /** The built volunteer and aux programs the platform serves (scripts/build-programs.ts writes them). */
  BARNRAISE_PROGRAMS_DIR: z.string().min(1).default(".programs"),
  /** The URL volunteers use to reach this platform, shown in join commands. Defaults to the request's origin. */
  BARNRAISE_PUBLIC_URL: z.url().optional(),
  /** Whether anyone may create an account with a username and password. */
  BARNRAISE_SIGNUP: z.enum(["open", "closed"]).default("open"),
  /** Accounts one client address may create per hour (abuse protection). */
  BARNRAISE_SIGNUP_LIMIT: z.coerce.number().int().min(1).max(1_000_000).default(10),
  /** How long an access pass is valid; peers refresh it before it expires. */
  BARNRAISE_PASS_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(7 * 24 * 3600)
    .default(4 * 3600),
  BARNRAISE_MAX_CHECKPOINT_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(2 ** 30),
  /** The largest file an organizer may upload (a dataset CSV), in bytes; 4 GiB by default. */
  BARNRAISE_MAX_UPLOAD_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(Number.MAX_SAFE_INTEGER)
    .default(4 * 2 ** 30),
  /** OIDC issuers: [{"id","name","issuer","clientId","clientSecret"}]. */
  BARNRAISE_OIDC_PROVIDERS: jsonList(oidcProviderSchema).optional(),
  AUTH_GITHUB_ID: z.string().min(1).optional(),
  AUTH_GITHUB_SECRET: z.string().min(1).optional(),
  AUTH_HUGGINGFACE_ID: z.string().min(1).optional(),
  AUTH_HUGGINGFACE_SECRET: z.string().min(1).optional(),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  /** The bearer secret a Prometheus scraper sends to `GET /metrics`; the endpoint is off without it. */
  BARNRAISE_METRICS_TOKEN: z
    .string()
    .min(
      16,
      "BARNRAISE_METRICS_TOKEN must be at least 16 characters (generate one with: openssl rand -hex 24)",
    )
    .optional(),
  /** The SMTP server alert e-mails go through: smtp://user:pass@host:587 (STARTTLS) or smtps://…:465. */
  BARNRAISE_SMTP_URL: z
    .url({
      protocol: /^smtps?$/,
      error: "must be an smtp:// or smtps:// URL, e.g. smtp://user:pass@host:587",
    })
    .optional(),
  /** The From of alert e-mails, e.g. "Barnraise <alerts@example.org>". */
  BARNRAISE_MAIL_FROM: z.string().min(3).max(320).optional(),
});

export interface ServerEnv {
  readonly nodeEnv: "development" | "production" | "test";
  readonly authSecret: string;
  readonly sealingSecrets: readonly string[];
  readonly databaseUrl: string;
  readonly dataDir: string;
  readonly programsDir: string;
  readonly publicUrl: string | undefined;
  readonly signup: "open" | "closed";
  /** Accounts one client address may create per hour. */
  readonly signupLimitPerHour: number;
  readonly passTtlMs: number;
  readonly maxCheckpointBytes: number;
  /** The largest upload (tus, `/api/v1/uploads`) accepted, in bytes. */
  readonly maxUploadBytes: number;
  readonly oidcProviders: readonly OidcProviderConfig[];
  readonly github: { readonly clientId: string; readonly clientSecret: string } | undefined;
  readonly huggingFace: { readonly clientId: string; readonly clientSecret: string } | undefined;
  readonly logLevel: string;
  /** The bearer secret of `GET /metrics`; undefined: the endpoint answers 404. */
  readonly metricsToken: string | undefined;
  /** Where alert e-mails are sent from; undefined: the platform sends no e-mail. */
  readonly smtp: { readonly url: string; readonly from: string } | undefined;
}

export class EnvError extends Error {
  override readonly name = "EnvError";
}

function pair(
  id: string | undefined,
  secretValue: string | undefined,
  names: string,
): { clientId: string; clientSecret: string } | undefined {
  if (id === undefined && secretValue === undefined) return undefined;
  if (id === undefined || secretValue === undefined) {
    throw new EnvError(`invalid environment:\n  - ${names}: set both or neither`);
  }
  return { clientId: id, clientSecret: secretValue };
}

/** Validates `source` (default `process.env`); throws an EnvError that lists every problem. */
export function loadServerEnv(source: Record<string, string | undefined> = process.env): ServerEnv {
  const parsed = envSchema.safeParse(source);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  - ${issue.path.join(".")}: ${issue.message}`);
    throw new EnvError(`invalid environment:\n${lines.join("\n")}`);
  }
  const env = parsed.data;
  const dataDir = isAbsolute(env.BARNRAISE_DATA_DIR)
    ? env.BARNRAISE_DATA_DIR
    : resolve(env.BARNRAISE_DATA_DIR);
  return {
    nodeEnv: env.NODE_ENV,
    authSecret: env.AUTH_SECRET,
    sealingSecrets: [env.BARNRAISE_SECRET, ...(env.BARNRAISE_PREVIOUS_SECRETS ?? [])],
    databaseUrl: env.DATABASE_URL ?? `file:${resolve(dataDir, "barnraise.db")}`,
    dataDir,
    programsDir: resolve(env.BARNRAISE_PROGRAMS_DIR),
    publicUrl: env.BARNRAISE_PUBLIC_URL?.replace(/\/+$/, ""),
    signup: env.BARNRAISE_SIGNUP,
    signupLimitPerHour: env.BARNRAISE_SIGNUP_LIMIT,
    passTtlMs: env.BARNRAISE_PASS_TTL_SECONDS * 1000,
    maxCheckpointBytes: env.BARNRAISE_MAX_CHECKPOINT_BYTES,
    maxUploadBytes: env.BARNRAISE_MAX_UPLOAD_BYTES,
    oidcProviders: env.BARNRAISE_OIDC_PROVIDERS ?? [],
    github: pair(env.AUTH_GITHUB_ID, env.AUTH_GITHUB_SECRET, "AUTH_GITHUB_ID and AUTH_GITHUB_SECRET"),
    huggingFace: pair(
      env.AUTH_HUGGINGFACE_ID,
      env.AUTH_HUGGINGFACE_SECRET,
      "AUTH_HUGGINGFACE_ID and AUTH_HUGGINGFACE_SECRET",
    ),
    logLevel: env.LOG_LEVEL,
    metricsToken: env.BARNRAISE_METRICS_TOKEN,
    smtp: smtpOf(env.BARNRAISE_SMTP_URL, env.BARNRAISE_MAIL_FROM),
  };
}

function smtpOf(
  url: string | undefined,
  from: string | undefined,
): { url: string; from: string } | undefined {
  if (url === undefined && from === undefined) return undefined;
  if (url === undefined || from === undefined) {
    throw new EnvError(
      "invalid environment:\n  - BARNRAISE_SMTP_URL and BARNRAISE_MAIL_FROM: set both (to send alert e-mails) or neither",
    );
  }
  return { url, from };
}
