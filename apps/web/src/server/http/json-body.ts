import type { z } from "zod";
import { AppError, AppErrorCode } from "../app-error.ts";
import { issuesOf } from "./validation.ts";

export const DEFAULT_MAX_JSON_BYTES = 64 * 1024;

/**
 * Reads a JSON body: it must be declared `application/json`, stay under `maxBytes` (counted while
 * streaming, whatever Content-Length claims), parse, and satisfy `schema`.
 */
export async function readJson<S extends z.ZodType>(
  req: Request,
  schema: S,
  maxBytes: number = DEFAULT_MAX_JSON_BYTES,
): Promise<z.output<S>> {
  const type = req.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new AppError(AppErrorCode.UNSUPPORTED_MEDIA_TYPE, "the body must be application/json");
  }
  const bytes = await readBytes(req, maxBytes);
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new AppError(AppErrorCode.INVALID_INPUT, "the body is not valid JSON");
  }
  return parseInput(schema, value);
}

export function parseInput<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = issuesOf(parsed.error);
    const first = issues[0];
    const summary = first ? `${first.path || "input"}: ${first.message}` : "invalid input";
    throw new AppError(AppErrorCode.INVALID_INPUT, summary, { issues });
  }
  return parsed.data;
}

/** The whole body, refused as soon as it passes `maxBytes`. */
export async function readBytes(req: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = Number(req.headers.get("content-length") ?? "0");
  if (declared > maxBytes) throw tooLarge(maxBytes);
  if (req.body === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw tooLarge(maxBytes);
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

function tooLarge(maxBytes: number): AppError {
  return new AppError(AppErrorCode.PAYLOAD_TOO_LARGE, `the body is larger than ${maxBytes} bytes`);
}
