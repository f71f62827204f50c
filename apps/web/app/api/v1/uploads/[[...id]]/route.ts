import { errorResponse } from "../../../../../src/server/http/route.ts";
import { getAppContext } from "../../../../../src/server/context.ts";
import { handleUploadRequest } from "../../../../../src/server/uploads/upload-server.ts";

/**
 * /api/v1/uploads and /api/v1/uploads/{id}: resumable uploads with the tus 1.0 protocol (creation,
 * creation-with-upload, creation-defer-length, termination). POST creates an upload (signed-in users
 * only), HEAD reads its offset, PATCH appends, DELETE removes it: each only for the upload's owner.
 * There is no GET: an upload is read only by the import that converts it. See
 * src/server/datasets/README.md.
 */
async function handle(req: Request): Promise<Response> {
  try {
    return await handleUploadRequest(req, getAppContext());
  } catch (error) {
    return errorResponse(error);
  }
}

export const POST = handle;
export const HEAD = handle;
export const PATCH = handle;
export const DELETE = handle;
export const OPTIONS = handle;
