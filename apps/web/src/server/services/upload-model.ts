import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { storeLayersModel, type StoredModelSummary, type UploadedFile } from "../models/model-store.ts";

/**
 * An organizer's model upload: a multipart form whose `files` parts are model.json and the weight
 * shards it names, each with its file name. The body was read within the size limit by the route.
 */
export async function uploadLayersModel(
  ctx: AppContext,
  contentType: string,
  body: Uint8Array,
): Promise<StoredModelSummary> {
  if (!/^multipart\/form-data\s*;/i.test(contentType)) {
    throw new AppError(AppErrorCode.UNSUPPORTED_MEDIA_TYPE, "the body must be multipart/form-data");
  }
  let form: FormData;
  try {
    form = await new Response(body as Uint8Array<ArrayBuffer>, {
      headers: { "content-type": contentType },
    }).formData();
  } catch {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the body is not a valid multipart form");
  }
  const files: UploadedFile[] = [];
  for (const part of form.getAll("files")) {
    if (typeof part === "string") {
      throw new AppError(AppErrorCode.INVALID_INPUT, "every `files` part must be a file", {
        issues: [{ path: "files", message: "must be a file" }],
      });
    }
    // Browsers send only the base name; a path from another client is cut to it.
    const name = part.name.split(/[\\/]/).pop() ?? part.name;
    files.push({ name, bytes: new Uint8Array(await part.arrayBuffer()) });
  }
  if (files.length === 0) {
    throw new AppError(AppErrorCode.INVALID_INPUT, "no files were uploaded", {
      issues: [{ path: "files", message: "choose model.json and its .bin weight files" }],
    });
  }
  const summary = await storeLayersModel(ctx.storage, files);
  ctx.logger.info({ sha256: summary.sha256, parameters: summary.parameters }, "model uploaded");
  return summary;
}
