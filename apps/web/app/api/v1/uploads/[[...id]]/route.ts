import { route } from "../../../../../src/server/http/route.ts";
import { handleUploadRequest } from "../../../../../src/server/uploads/upload-server.ts";

/**
 * /api/v1/uploads and /api/v1/uploads/{id}: resumable uploads with the tus 1.0 protocol (creation,
 * creation-with-upload, creation-defer-length, termination). POST creates an upload (signed-in users
 * only), HEAD reads its offset, PATCH appends, DELETE removes it: each only for the upload's owner.
 * There is no GET: an upload is read only by the import that converts it. See
 * src/server/datasets/README.md.
 */
const handle = route<{ id?: string[] }>(({ req, ctx }) => handleUploadRequest(req, ctx));

export const POST = handle;
export const HEAD = handle;
export const PATCH = handle;
export const DELETE = handle;
export const OPTIONS = handle;
