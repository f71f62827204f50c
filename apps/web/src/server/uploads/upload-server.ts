import { join } from "node:path";
import { FileStore } from "@tus/file-store";
import { ERRORS, Server, type Upload } from "@tus/server";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { assertSameOrigin, readSessionUser } from "../http/session.ts";
import type { SessionUser } from "../records.ts";

/**
 * Resumable uploads (the tus 1.0 protocol, https://tus.io/protocols/resumable-upload) at
 * `/api/v1/uploads`, stored by `@tus/file-store` under `<data dir>/uploads/`: `<id>` holds the bytes
 * received so far and `<id>.json` the upload's length and metadata. Only signed-in users may create
 * uploads, and only the user who created one may see (HEAD), append to (PATCH) or delete it: the
 * creator's user id is written into the upload's metadata (`owner`) when it is created, whatever
 * the client sent, and checked on every later request. Anything else is refused before the tus
 * server sees it. Errors are plain text, as tus clients expect them.
 */

export const UPLOADS_PATH = "/api/v1/uploads";
/** tus ids are 16 random bytes in hex (the server's default naming). */
export const UPLOAD_ID_PATTERN = /^[0-9a-f]{32}$/;
const MAX_FILE_NAME = 255;

export function uploadsDir(dataDir: string): string {
  return join(dataDir, "uploads");
}

interface UploadService {
  readonly server: Server;
  readonly store: FileStore;
}

// One tus server per app context (tests install several), kept on globalThis like the context.
const holder = globalThis as typeof globalThis & {
  __barnraiseUploadServices?: WeakMap<AppContext, UploadService>;
};
/** The signed-in user of each request in flight, for the tus hooks (which only get the request). */
const requestUsers = new WeakMap<Request, SessionUser>();

function uploadService(ctx: AppContext): UploadService {
  holder.__barnraiseUploadServices ??= new WeakMap();
  let service = holder.__barnraiseUploadServices.get(ctx);
  if (service === undefined) {
    service = createUploadService(ctx);
    holder.__barnraiseUploadServices.set(ctx, service);
  }
  return service;
}

/** A refusal in the shape the tus server answers with: `status_code` and a plain-text `body`. */
class TusRefusal extends Error {
  override readonly name = "TusRefusal";
  readonly status_code: number;
  readonly body: string;

  constructor(status: number, message: string) {
    super(message);
    this.status_code = status;
    this.body = `${message}\n`;
  }
}

function tusError(status: number, message: string): TusRefusal {
  return new TusRefusal(status, message);
}

function hasControlCharacters(text: string): boolean {
  for (let index = 0; index < text.length; index += 1) {
    const code = text.charCodeAt(index);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** An upload not finished within a week is deleted (tus's `Upload-Expires` tells the client). */
const UPLOAD_EXPIRY_MS = 7 * 24 * 60 * 60 * 1000;

function createUploadService(ctx: AppContext): UploadService {
  const store = new FileStore({
    directory: uploadsDir(ctx.env.dataDir),
    expirationPeriodInMilliseconds: UPLOAD_EXPIRY_MS,
  });
  const maxBytes = ctx.env.maxUploadBytes;
  const server = new Server({
    path: UPLOADS_PATH,
    datastore: store,
    maxSize: maxBytes,
    // `Location: /api/v1/uploads/<id>`: right behind any proxy, whatever Host it forwards.
    relativeLocation: true,
    // Same-origin only: no Access-Control-Allow-Origin header.
    allowedOrigins: [],
    getFileIdFromRequest: (_req, lastPath) =>
      lastPath !== undefined && UPLOAD_ID_PATTERN.test(lastPath) ? lastPath : undefined,
    async onIncomingRequest(req, id) {
      const user = requestUsers.get(req);
      if (user === undefined) throw tusError(401, "sign in to upload files");
      if (req.method === "POST") return; // a new upload: its id was just made
      const upload = await store.getUpload(id); // FILE_NOT_FOUND (404) when there is none
      if (upload.metadata?.owner !== user.id) throw tusError(403, "this upload belongs to another user");
    },
    onUploadCreate(req, upload) {
      const user = requestUsers.get(req);
      if (user === undefined) return Promise.reject(tusError(401, "sign in to upload files"));
      const fileName = (upload.metadata?.filename ?? "").trim();
      if (fileName.length > MAX_FILE_NAME || hasControlCharacters(fileName)) {
        return Promise.reject(
          tusError(
            400,
            `the file name (metadata "filename") must be at most ${MAX_FILE_NAME} printable characters`,
          ),
        );
      }
      const metadata: Record<string, string> = {
        filename: fileName === "" ? "upload" : fileName,
        owner: user.id,
      };
      const type = upload.metadata?.filetype;
      if (typeof type === "string" && type.length <= 255) metadata.filetype = type;
      return Promise.resolve({ metadata });
    },
    onUploadFinish(_req, upload) {
      ctx.metrics.uploads.inc({ kind: "dataset" });
      ctx.metrics.uploadBytes.inc({ kind: "dataset" }, upload.size ?? upload.offset);
      return Promise.resolve({});
    },
    onResponseError(_req, error) {
      const status = "status_code" in error ? error.status_code : 500;
      if (status === ERRORS.ERR_MAX_SIZE_EXCEEDED.status_code) {
        return Promise.resolve(
          tusError(
            413,
            `the file is larger than this platform accepts: at most ${maxBytes} bytes (BARNRAISE_MAX_UPLOAD_BYTES)`,
          ),
        );
      }
      if (!("status_code" in error)) ctx.logger.error({ err: error }, "upload failed");
      return Promise.resolve(undefined);
    },
  });
  // Unfinished uploads a week old are deleted: now, and every hour while the platform runs.
  const cleanUp = () => {
    server.cleanUpExpiredUploads().then(
      (removed) => {
        if (removed > 0) ctx.logger.info({ removed }, "deleted expired unfinished uploads");
      },
      (error: unknown) => {
        ctx.logger.warn({ err: error }, "could not delete expired uploads");
      },
    );
  };
  cleanUp();
  setInterval(cleanUp, 60 * 60 * 1000).unref();
  return { server, store };
}

/**
 * Handles a tus request to `/api/v1/uploads[/<id>]`: the caller must be signed in (401), and a
 * write must come from this platform's own pages (403 for another origin); the tus hooks then keep
 * each upload to its owner (403).
 */
export async function handleUploadRequest(req: Request, ctx: AppContext): Promise<Response> {
  const { server } = uploadService(ctx);
  // OPTIONS announces the protocol's version, extensions and the maximum size to anyone.
  if (req.method !== "OPTIONS") {
    const user = await readSessionUser(req, ctx);
    if (user === null) return plainError(401, "sign in to upload files");
    try {
      if (req.method !== "HEAD") assertSameOrigin(req, ctx);
    } catch (error) {
      if (error instanceof AppError) return plainError(403, error.message);
      throw error;
    }
    requestUsers.set(req, user);
  }
  return server.handleWeb(req);
}

function plainError(status: number, message: string): Response {
  return new Response(`${message}\n`, {
    status,
    headers: {
      "content-type": "text/plain; charset=utf-8",
      "tus-resumable": "1.0.0",
      "cache-control": "no-store",
    },
  });
}

export interface StoredUpload {
  readonly id: string;
  /** The file holding the bytes received so far. */
  readonly path: string;
  readonly fileName: string;
  readonly ownerId: string;
  /** The declared length; undefined while the client defers it. */
  readonly size: number | undefined;
  /** Bytes received so far. */
  readonly offset: number;
}

/** An upload by id: NOT_FOUND when there is none. */
export async function findUpload(ctx: AppContext, id: string): Promise<StoredUpload> {
  const { store } = uploadService(ctx);
  const missing = () => new AppError(AppErrorCode.NOT_FOUND, `there is no upload "${id}"`);
  if (!UPLOAD_ID_PATTERN.test(id)) throw missing();
  let upload: Upload;
  try {
    upload = await store.getUpload(id);
  } catch (error) {
    if (isTusError(error)) throw missing();
    throw error;
  }
  return {
    id,
    path: join(store.directory, id),
    fileName: upload.metadata?.filename ?? "upload",
    ownerId: upload.metadata?.owner ?? "",
    size: upload.size,
    offset: upload.offset,
  };
}

/** An upload of `user`: NOT_FOUND when there is none, FORBIDDEN when it is someone else's. */
export async function findOwnUpload(ctx: AppContext, user: SessionUser, id: string): Promise<StoredUpload> {
  const upload = await findUpload(ctx, id);
  if (upload.ownerId !== user.id)
    throw new AppError(AppErrorCode.FORBIDDEN, "this upload belongs to another user");
  return upload;
}

/** Deletes an upload's file and its info (after it was imported); a missing one is no error. */
export async function removeUpload(ctx: AppContext, id: string): Promise<void> {
  try {
    await uploadService(ctx).store.remove(id);
  } catch (error) {
    if (!isTusError(error)) throw error;
  }
}

function isTusError(error: unknown): boolean {
  return typeof error === "object" && error !== null && "status_code" in error && "body" in error;
}
