import { isAbsolute, resolve } from "node:path";
import { z } from "zod";
import type { S3StorageConfig } from "./storage/s3-object-store.ts";

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

/** A bucket name as S3 accepts it: 3-63 lowercase letters, digits, "." and "-". */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const PREFIX_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$/;
const STORAGE_URL_FORM = "must look like s3://bucket or s3://bucket/prefix (unset: the data directory)";

/** `s3://bucket/optional/prefix` → the bucket and the prefix ("" or ending with "/"). */
const storageUrl = z.string().transform((text, ctx) => {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    ctx.addIssue({ code: "custom", message: `${STORAGE_URL_FORM}, got "${text}"` });
    return z.NEVER;
  }
  const problem =
    url.protocol !== "s3:"
      ? `the scheme must be s3: (got ${url.protocol})`
      : url.username !== "" || url.password !== ""
        ? "credentials do not belong in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        : url.search !== "" || url.hash !== "" || url.port !== ""
          ? "it takes no port, query or fragment: set the endpoint with AWS_ENDPOINT_URL_S3"
          : !BUCKET.test(url.hostname)
            ? `"${url.hostname}" is not a bucket name (3-63 lowercase letters, digits, "." and "-")`
            : undefined;
  const segments = url.pathname.split("/").filter((segment) => segment !== "");
  const badSegment = segments.find((segment) => !PREFIX_SEGMENT.test(segment));
  if (problem !== undefined || badSegment !== undefined) {
    const why =
      problem ?? `the prefix segment "${badSegment}" may hold only letters, digits, "_", "-" and "."`;
    ctx.addIssue({ code: "custom", message: `${STORAGE_URL_FORM}: ${why}` });
    return z.NEVER;
  }
  return { bucket: url.hostname, prefix: segments.map((segment) => `${segment}/`).join("") };
});

const flag = z.enum(["0", "1", "true", "false"]).transform((value) => value === "1" || value === "true");

/** Where the platform keeps its files; also read alone by `npm run datasets:prepare`. */
const storageFields = {
  /** The default SQLite file, upload staging, and checkpoints, models and datasets without BARNRAISE_STORAGE_URL. */
  BARNRAISE_DATA_DIR: z.string().min(1).default(".data"),
  /** `s3://bucket/prefix`: checkpoints, models and dataset shards in an S3-compatible store. */
  BARNRAISE_STORAGE_URL: storageUrl.optional(),
  /** Path-style S3 URLs (endpoint/bucket/key), which most self-hosted S3-compatible stores need. */
  BARNRAISE_S3_FORCE_PATH_STYLE: flag.default(false),
  /**
   * The AWS SDK's own variables, read as they are here and checked (awsSchema) only with
   * BARNRAISE_STORAGE_URL: other software's settings in the environment never stop a platform that
   * keeps its files on disk.
   */
  AWS_ENDPOINT_URL_S3: z.string().optional(),
  AWS_ENDPOINT_URL: z.string().optional(),
  AWS_REGION: z.string().optional(),
  AWS_ACCESS_KEY_ID: z.string().optional(),
  AWS_SECRET_ACCESS_KEY: z.string().optional(),
  AWS_SESSION_TOKEN: z.string().optional(),
};

/** The S3 endpoint (AWS's endpoint for the region when unset), region and credentials. */
const awsSchema = z.object({
  AWS_ENDPOINT_URL_S3: z.url().optional(),
  AWS_ENDPOINT_URL: z.url().optional(),
  AWS_REGION: z.string().min(1).optional(),
  AWS_ACCESS_KEY_ID: z.string().min(1).optional(),
  AWS_SECRET_ACCESS_KEY: z.string().min(1).optional(),
  AWS_SESSION_TOKEN: z.string().min(1).optional(),
});

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
  ...storageFields,
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
  /**
   * "allow" lets webhooks reach loopback, private and link-local addresses (a receiver on the
   * platform's own network); by default they reach public addresses only.
   */
  BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES: z.enum(["refuse", "allow"]).default("refuse"),
});

export interface ServerEnv {
  readonly nodeEnv: "development" | "production" | "test";
  readonly authSecret: string;
  readonly sealingSecrets: readonly string[];
  readonly databaseUrl: string;
  readonly dataDir: string;
  /** Where checkpoints, models and dataset shards live: the data directory, or an S3 bucket. */
  readonly storage: StorageConfig;
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
  /** Whether webhooks may reach non-public addresses (BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES). */
  readonly webhookPrivateAddresses: "refuse" | "allow";
}

export type StorageConfig = { readonly kind: "local" } | ({ readonly kind: "s3" } & S3StorageConfig);

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

function storageConfig(env: z.infer<typeof storageSchema>): StorageConfig {
  if (env.BARNRAISE_STORAGE_URL === undefined) return { kind: "local" };
  const parsed = awsSchema.safeParse(env);
  if (!parsed.success) throw issuesError(parsed.error);
  const aws = parsed.data;
  const accessKeyId = aws.AWS_ACCESS_KEY_ID;
  const secretAccessKey = aws.AWS_SECRET_ACCESS_KEY;
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    throw new EnvError(
      "invalid environment:\n  - AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither",
    );
  }
  return {
    kind: "s3",
    ...env.BARNRAISE_STORAGE_URL,
    endpoint: aws.AWS_ENDPOINT_URL_S3 ?? aws.AWS_ENDPOINT_URL,
    region: aws.AWS_REGION ?? "us-east-1",
    forcePathStyle: env.BARNRAISE_S3_FORCE_PATH_STYLE,
    credentials:
      accessKeyId !== undefined && secretAccessKey !== undefined
        ? {
            accessKeyId,
            secretAccessKey,
            ...(aws.AWS_SESSION_TOKEN !== undefined ? { sessionToken: aws.AWS_SESSION_TOKEN } : {}),
          }
        : undefined,
  };
}

const storageSchema = z.object(storageFields);

function issuesError(error: z.ZodError): EnvError {
  const lines = error.issues.map((issue) => `  - ${issue.path.join(".")}: ${issue.message}`);
  return new EnvError(`invalid environment:\n${lines.join("\n")}`);
}

function absoluteDataDir(dir: string): string {
  return isAbsolute(dir) ? dir : resolve(dir);
}

/**
 * Only the variables that say where the platform's files are (the data directory and the object
 * store), for command-line tools that write there without running the platform.
 */
export function loadStorageEnv(
  source: Record<string, string | undefined> = process.env,
): Pick<ServerEnv, "dataDir" | "storage"> {
  const parsed = storageSchema.safeParse(source);
  if (!parsed.success) throw issuesError(parsed.error);
  return { dataDir: absoluteDataDir(parsed.data.BARNRAISE_DATA_DIR), storage: storageConfig(parsed.data) };
}

/** Validates `source` (default `process.env`); throws an EnvError that lists every problem. */
export function loadServerEnv(source: Record<string, string | undefined> = process.env): ServerEnv {
  const parsed = envSchema.safeParse(source);
  if (!parsed.success) throw issuesError(parsed.error);
  const env = parsed.data;
  const dataDir = absoluteDataDir(env.BARNRAISE_DATA_DIR);
  return {
    nodeEnv: env.NODE_ENV,
    authSecret: env.AUTH_SECRET,
    sealingSecrets: [env.BARNRAISE_SECRET, ...(env.BARNRAISE_PREVIOUS_SECRETS ?? [])],
    databaseUrl: env.DATABASE_URL ?? `file:${resolve(dataDir, "barnraise.db")}`,
    dataDir,
    storage: storageConfig(env),
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
    webhookPrivateAddresses: env.BARNRAISE_WEBHOOK_PRIVATE_ADDRESSES,
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
