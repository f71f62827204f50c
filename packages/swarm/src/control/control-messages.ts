import { MAX_CONTROL_TOKEN_LENGTH } from "@barnraise/protocol";
import { z } from "zod";
import { defineMethod } from "../rpc/rpc.ts";

/**
 * The "control" exchange: a node pushes the newest run control it holds (the organizer's signed
 * standing orders: pause, bans, rollback) to a member. A token may be far larger than a head may
 * (512 KiB against 64 KiB), so it travels as frames: the request head announces its length, the
 * receiver answers `{ ok: true }`, the sender streams the token's UTF-8 bytes and closes its writing
 * end, and the receiver sends back one CBOR result frame — `{ adopted, version }`, or `{ error }`
 * with a stable code (CONTROL_BAD_SIGNATURE, CONTROL_WRONG_EXPERIMENT, MALFORMED …) when it refused
 * the token.
 */

/** Largest frame of a pushed token. */
export const CONTROL_FRAME_BYTES = 32 << 10;

export const controlRequestSchema = z.strictObject({
  /** Length of the token in UTF-8 bytes. */
  bytes: z.number().int().min(1).max(MAX_CONTROL_TOKEN_LENGTH),
});

export type ControlRequest = z.infer<typeof controlRequestSchema>;

/** What the receiver made of a pushed token. */
export const controlResultSchema = z.union([
  z.strictObject({
    /** Whether the token was newer than the one the receiver held, and so replaced it. */
    adopted: z.boolean(),
    /** The version the receiver holds now. */
    version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  }),
  z.strictObject({
    error: z.strictObject({ code: z.string().min(1).max(64), message: z.string().max(1024) }),
  }),
]);

export type ControlResult = z.infer<typeof controlResultSchema>;

export const controlMethod = defineMethod({
  name: "control",
  request: controlRequestSchema,
  response: z.strictObject({ ok: z.literal(true) }),
  maxFrameBytes: CONTROL_FRAME_BYTES,
});
