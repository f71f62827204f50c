import { createHash } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { POST as uploadRoute } from "../../app/api/v1/experiments/[id]/checkpoints/route.ts";
import { signedAuthorization, type SignInit } from "./peer-fixtures.ts";
import { callRoute } from "./test-app.ts";

/** Helpers for checkpoint upload tests: signed uploads with any body, and what the store holds. */

export function sha256(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(bytes).digest());
}

/** `bytes` as a stream of `chunkSize` chunks, optionally failing after `failAfter` chunks. */
export function chunkedStream(
  bytes: Uint8Array,
  options: { chunkSize?: number; failAfter?: number } = {},
): ReadableStream<Uint8Array> {
  const chunkSize = options.chunkSize ?? 64 * 1024;
  let offset = 0;
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (options.failAfter !== undefined && sent >= options.failAfter) {
        controller.error(new Error("connection reset by peer"));
        return;
      }
      if (offset >= bytes.length) {
        controller.close();
        return;
      }
      controller.enqueue(bytes.slice(offset, offset + chunkSize));
      offset += chunkSize;
      sent += 1;
    },
  });
}

export interface UploadInit {
  readonly node: SignInit["node"];
  readonly experimentId: string;
  readonly step: number;
  readonly loss?: number;
  /** The rollback generation, sent as `&generation=` when given. */
  readonly generation?: number;
  /** Declared size; the body's length unless given. */
  readonly sizeBytes?: number;
  /** The bytes whose SHA-256 is signed; the body unless given. */
  readonly signedBytes?: Uint8Array;
  /** What is sent: bytes (with a matching Content-Length unless `contentLength` says otherwise) or a stream. */
  readonly body: Uint8Array | ReadableStream<Uint8Array>;
  readonly contentLength?: number | null;
}

export function uploadPath(
  init: Pick<UploadInit, "experimentId" | "step" | "loss" | "sizeBytes" | "generation">,
  size: number,
) {
  const loss = init.loss === undefined ? "" : `&loss=${init.loss}`;
  const generation = init.generation === undefined ? "" : `&generation=${init.generation}`;
  return `/api/v1/experiments/${init.experimentId}/checkpoints?step=${init.step}${loss}&sizeBytes=${init.sizeBytes ?? size}${generation}`;
}

export function upload(init: UploadInit): Promise<Response> {
  const bodyLength = init.body instanceof Uint8Array ? init.body.length : undefined;
  const signed = init.signedBytes ?? (init.body instanceof Uint8Array ? init.body : undefined);
  if (signed === undefined) throw new Error("signedBytes is needed with a stream body");
  const path = uploadPath(init, init.sizeBytes ?? signed.length);
  const headers: Record<string, string> = {
    "content-type": "application/octet-stream",
    authorization: signedAuthorization({ node: init.node, path, body: { sha256: sha256(signed) } }),
  };
  const contentLength = init.contentLength === undefined ? bodyLength : init.contentLength;
  if (contentLength !== undefined && contentLength !== null)
    headers["content-length"] = String(contentLength);
  return callRoute(uploadRoute, path, {
    method: "POST",
    params: { id: init.experimentId },
    body: init.body,
    headers,
  });
}

/** Files in the local checkpoint store: the visible ones and the staging ones. */
export async function storeContents(dataDir: string): Promise<{ visible: string[]; staging: string[] }> {
  return {
    visible: await filesUnder(join(dataDir, "checkpoints")),
    staging: (await filesUnder(join(dataDir, ".staging"))).map((file) => `.staging/${file}`),
  };
}

/** Every file under `root`, by relative path, sorted; none when it does not exist. */
async function filesUnder(root: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(root, { recursive: true, withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name).slice(root.length + 1))
    .sort();
}
