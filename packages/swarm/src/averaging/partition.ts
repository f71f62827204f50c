import type { Compressor } from "../compression/index.ts";
import { SwarmError, SwarmErrorCode } from "../errors.ts";

/**
 * Who does what in one butterfly all-reduce round (thesis Fig. 6): the group formed by
 * matchmaking, the contiguous part of the flat vector each member reduces, and the chunks those
 * parts are streamed in. Everything here is pure and deterministic, so every member derives the
 * same plan from the same group.
 */

/** node: sends, reduces, takes the result; client: cannot accept connections, so it only sends and receives; aux: reduces with weight 0 and takes no result. */
export type AveragingMode = "node" | "client" | "aux";

/** One member of a group. `weight` is its sample count (0 for aux members). */
export interface GroupMember {
  peerId: string;
  mode: AveragingMode;
  weight: number;
}

/** A group formed by matchmaking; every member holds the same object. */
export interface AllReduceGroup {
  /** Unique per round, the same on every member. */
  groupId: string;
  /** The same order on every member; member j reduces part j. */
  members: readonly GroupMember[];
  /** Per member, summing to 1, 0 for client-mode members (from load balancing). */
  fractions: readonly number[];
}

/** A half-open element range [start, end). */
export interface ElementRange {
  start: number;
  end: number;
}

/** Contiguous ranges for parts of the given element counts, in order. */
export function partRanges(length: number, counts: readonly number[]): ElementRange[] {
  const ranges: ElementRange[] = [];
  let start = 0;
  for (const count of counts) {
    if (!Number.isSafeInteger(count) || count < 0) {
      throw new SwarmError(
        SwarmErrorCode.LENGTH_MISMATCH,
        `part element count ${count} is not a non-negative integer`,
      );
    }
    ranges.push({ start, end: start + count });
    start += count;
  }
  if (start !== length) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `part counts sum to ${start}, the vector has ${length} elements`,
    );
  }
  return ranges;
}

/** Splits [start, end) into consecutive chunks of `chunkElements` (the last one may be shorter). */
export function chunkRanges(start: number, end: number, chunkElements: number): ElementRange[] {
  if (!Number.isSafeInteger(chunkElements) || chunkElements < 1) {
    throw new SwarmError(
      SwarmErrorCode.LENGTH_MISMATCH,
      `chunk size ${chunkElements} is not a positive integer`,
    );
  }
  const chunks: ElementRange[] = [];
  for (let at = start; at < end; at += chunkElements)
    chunks.push({ start: at, end: Math.min(end, at + chunkElements) });
  return chunks;
}

/** Most elements in one chunk (the all-reduce head's limit). */
export const MAX_CHUNK_ELEMENTS = 2 ** 24;

/**
 * Elements per chunk for a chunk size in encoded payload bytes (codec parameters not counted), at
 * least one and at most MAX_CHUNK_ELEMENTS. Sizing chunks by what goes on the wire keeps the
 * pipeline's granularity and each sender's window (chunksInFlight chunks) the same number of bytes
 * whatever the codec: 8 KiB is 2,048 raw float32 values or 8,192 8-bit codes. Every member derives
 * the same count from the config and the round's codec.
 */
export function chunkElementsFor(
  chunkSizeBytes: number,
  compressor: Pick<Compressor, "bitsPerElement">,
): number {
  const elements = Math.floor((chunkSizeBytes * 8) / compressor.bitsPerElement);
  return Math.min(MAX_CHUNK_ELEMENTS, Math.max(1, elements));
}

/** The roles of one round, as every member derives them. */
export interface RoundPlan {
  readonly group: AllReduceGroup;
  /** Index of the local member. */
  readonly selfIndex: number;
  /** Part j, reduced by member j (empty for members with count 0). */
  readonly parts: readonly ElementRange[];
  /** Members that send their vector and take the result: every non-aux member. */
  readonly participants: ReadonlySet<number>;
  /** Participants whose group weight is positive: their chunks are awaited and averaged. */
  readonly contributors: ReadonlySet<number>;
}

/**
 * Checks a group and part counts and derives the plan. A weight-0 node or client is a participant
 * that contributes nothing: it opens its streams to take the result but sends no chunks, so the
 * reducers never wait on it and its upload is spared.
 */
export function planRound(
  group: AllReduceGroup,
  partCounts: readonly number[],
  length: number,
  selfPeerId: string,
): RoundPlan {
  const { members } = group;
  const invalid = (message: string) =>
    new SwarmError(SwarmErrorCode.ALLREDUCE_FAILED, `invalid all-reduce group ${group.groupId}: ${message}`);
  if (members.length < 1) throw invalid("it has no members");
  if (partCounts.length !== members.length || group.fractions.length !== members.length) {
    throw invalid(
      `${members.length} members, ${partCounts.length} part counts, ${group.fractions.length} fractions`,
    );
  }
  if (new Set(members.map((member) => member.peerId)).size !== members.length) {
    throw invalid("a peer appears twice");
  }
  const selfIndex = members.findIndex((member) => member.peerId === selfPeerId);
  if (selfIndex < 0) throw invalid(`${selfPeerId} is not a member`);
  if (length < 1) throw new SwarmError(SwarmErrorCode.LENGTH_MISMATCH, "cannot average an empty vector");
  const parts = partRanges(length, partCounts);
  const participants = new Set<number>();
  const contributors = new Set<number>();
  members.forEach((member, index) => {
    if (!Number.isFinite(member.weight) || member.weight < 0) {
      throw invalid(`member ${index} has weight ${member.weight}`);
    }
    const count = partCounts[index] ?? 0;
    // Clients reduce only in a group of clients (through their relays): anyone else reduces first.
    if (member.mode === "client" && count > 0 && members.some((other) => other.mode !== "client")) {
      throw invalid(`client-mode member ${index} cannot reduce ${count} elements`);
    }
    if (member.mode === "aux") {
      if (member.weight !== 0) throw invalid(`aux member ${index} must have weight 0`);
      return;
    }
    participants.add(index);
    if (member.weight > 0) contributors.add(index);
  });
  if (contributors.size === 0) throw invalid("no member contributes a positive weight");
  return { group, selfIndex, parts, participants, contributors };
}
