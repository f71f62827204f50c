import { z } from "zod";
import { defineMethod } from "../rpc/rpc.ts";
import { HASH_BYTES, chunkCount } from "./state-snapshot.ts";

/**
 * The two exchanges of state sharing. A downloader asks donors for a manifest ("state-manifest"),
 * then streams ranges of chunks from them ("state-chunks"): the donor answers `{ ok: true }` and
 * sends one raw frame per chunk, in order, then closes its writing end.
 *
 * Limits keep every head far below the 64 KiB head cap: at most `MAX_STATE_CHUNKS` hashes of
 * 32 bytes, chunks of at most `MAX_STATE_CHUNK_BYTES`, so one state is at most 4 GiB.
 */

/** Most chunks one manifest may list (1024 × 34 CBOR bytes ≈ 34 KiB of hashes). */
export const MAX_STATE_CHUNKS = 1024;
/** Largest chunk, and so the largest frame of "state-chunks". */
export const MAX_STATE_CHUNK_BYTES = 4 << 20;
/** Largest state a manifest can describe. */
export const MAX_STATE_BYTES = MAX_STATE_CHUNKS * MAX_STATE_CHUNK_BYTES;

const epochSchema = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

const hashSchema = z
  .instanceof(Uint8Array)
  .refine((bytes) => bytes.length === HASH_BYTES, { message: `must be a ${HASH_BYTES}-byte SHA-256 digest` });

/**
 * Asks a donor for its newest state at or after `minEpoch`, of run generation `generation` when
 * given (a donor whose state belongs to another generation refuses).
 */
export const stateManifestRequestSchema = z.strictObject({
  minEpoch: epochSchema,
  generation: epochSchema.optional(),
});

export type StateManifestRequest = z.infer<typeof stateManifestRequestSchema>;

/** What a donor serves: the blob's size, its chunking, each chunk's SHA-256 and the root over them. */
export const stateManifestSchema = z
  .strictObject({
    epoch: epochSchema,
    totalBytes: z.number().int().positive().max(MAX_STATE_BYTES),
    chunkBytes: z.number().int().positive().max(MAX_STATE_CHUNK_BYTES),
    root: hashSchema,
    chunkHashes: z.array(hashSchema).min(1).max(MAX_STATE_CHUNKS),
  })
  .refine(
    (manifest) => manifest.chunkHashes.length === chunkCount(manifest.totalBytes, manifest.chunkBytes),
    {
      message: "chunkHashes must hold exactly one hash per chunk of totalBytes",
      path: ["chunkHashes"],
    },
  );

export type StateManifest = z.infer<typeof stateManifestSchema>;

/** Asks for chunks `fromChunk` (inclusive) to `toChunk` (exclusive) of the snapshot named by (epoch, root). */
export const stateChunksRequestSchema = z
  .strictObject({
    epoch: epochSchema,
    root: hashSchema,
    fromChunk: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_STATE_CHUNKS - 1),
    toChunk: z.number().int().positive().max(MAX_STATE_CHUNKS),
  })
  .refine((request) => request.fromChunk < request.toChunk, {
    message: "fromChunk must be below toChunk",
    path: ["toChunk"],
  });

export type StateChunksRequest = z.infer<typeof stateChunksRequestSchema>;

/**
 * Unary: `{ minEpoch, generation? }` → manifest, or a STATE_UNAVAILABLE error when the donor has
 * nothing that new (or only a state of another generation).
 */
export const stateManifestMethod = defineMethod({
  name: "state-manifest",
  request: stateManifestRequestSchema,
  response: stateManifestSchema,
  maxFrameBytes: 1024,
});

/**
 * Streamed: range request → `{ ok: true }` then one frame per chunk. A donor that no longer holds
 * (epoch, root) refuses with STATE_UNAVAILABLE; a range past the snapshot's end with MALFORMED_MESSAGE.
 */
export const stateChunksMethod = defineMethod({
  name: "state-chunks",
  request: stateChunksRequestSchema,
  response: z.strictObject({ ok: z.literal(true) }),
  maxFrameBytes: MAX_STATE_CHUNK_BYTES,
});
