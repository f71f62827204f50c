import { AccessPassVerifier, MAX_PASS_TOKEN_LENGTH, type AccessPass } from "@barnraise/protocol";
import { TopicValidatorResult, type GossipSub, type Message } from "@libp2p/gossipsub";
import type { PeerId } from "@libp2p/interface";
import { decode, encode } from "cborg";
import { z } from "zod";
import type { PeerIdString } from "../rpc/rpc.ts";
import { checkRecordRole, progressRecordSchema, type ProgressRecord } from "./progress-messages.ts";
import type { ProgressLogger, ProgressOffer, ProgressTransport } from "./progress-transport.ts";

/** Largest progress message accepted from gossip: a pass and a record are well under 2 KiB. */
export const MAX_PROGRESS_MESSAGE_BYTES = 4096;
/** Origins whose last sequence number is remembered, to refuse replays of older messages. */
const MAX_REMEMBERED_ORIGINS = 4096;

/** The experiment's progress topic. */
export function progressTopic(experimentId: string): string {
  return `barnraise/${experimentId}/progress`;
}

/** What a gossiped progress message carries: the origin's access pass and its record. */
const envelopeSchema = z.strictObject({
  pass: z.string().min(1).max(MAX_PASS_TOKEN_LENGTH),
  record: progressRecordSchema,
});

export interface GossipProgressTransportOptions {
  readonly pubsub: GossipSub;
  readonly topic: string;
  readonly self: PeerIdString;
  /** The node's pass verifier: the same instance its revocation list is applied to. */
  readonly passes: AccessPassVerifier;
  /** This node's current pass token, put into every message. */
  readonly currentPass: () => string;
  readonly now?: () => number;
  readonly logger?: ProgressLogger;
}

/**
 * Why a gossiped progress message was refused, for logs and tests: not signed, not a progress
 * message, an invalid pass, a pass of another key than the signature's, a record that does not
 * fit the pass's role (`checkRecordRole`), or one the tracker refused as implausible.
 */
export type ProgressRejection = "unsigned" | "malformed" | "pass" | "key" | "role" | "implausible";

/**
 * Spreads progress records by gossipsub on one topic per experiment. A record may reach a peer
 * relayed by members that are not its origin, so each message carries everything a receiver needs
 * to authenticate it on its own: gossipsub's StrictSign signature by the origin's libp2p key (the
 * Ed25519 key its pass names) and the origin's access pass. The topic validator verifies the pass
 * (authority signature, experiment, expiry, revocation), that it names the signing key and that
 * the record fits the pass's role (an aux claims no trainer samples: `checkRecordRole`), and
 * refuses replays of older messages of an origin. A message that fails is rejected: gossipsub does
 * not forward it and counts it against the peer that sent it; so does a record the tracker refuses
 * as implausible (a claim no trainer could make, see `implausibility`). A valid message the tracker does not
 * take (rate cap, full table) is ignored, so it is not forwarded either.
 */
export class GossipProgressTransport implements ProgressTransport {
  readonly #options: GossipProgressTransportOptions;
  readonly #now: () => number;
  /** The highest sequence number taken from each origin. */
  readonly #sequence = new Map<PeerIdString, bigint>();
  #offer: ProgressOffer | undefined;
  #rejections: ((origin: string, reason: ProgressRejection) => void) | undefined;

  constructor(options: GossipProgressTransportOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  get self(): PeerIdString {
    return this.#options.self;
  }

  /** Calls `listener` for each message refused by the validator (one at a time). */
  onRejected(listener: (origin: string, reason: ProgressRejection) => void): void {
    this.#rejections = listener;
  }

  start(offer: ProgressOffer): void {
    if (this.#offer !== undefined) return;
    this.#offer = offer;
    const { pubsub, topic } = this.#options;
    pubsub.topicValidators.set(topic, (propagationSource, message) =>
      this.#validate(propagationSource, message),
    );
    pubsub.subscribe(topic);
  }

  stop(): void {
    if (this.#offer === undefined) return;
    this.#offer = undefined;
    const { pubsub, topic } = this.#options;
    try {
      pubsub.unsubscribe(topic);
    } catch (error) {
      this.#options.logger?.debug({ err: error }, "leaving the progress topic failed");
    }
    pubsub.topicValidators.delete(topic);
  }

  async publish(record: ProgressRecord): Promise<void> {
    if (this.#offer === undefined) return;
    try {
      const data = encode({ pass: this.#options.currentPass(), record });
      await this.#options.pubsub.publish(this.#options.topic, data);
    } catch (error) {
      this.#options.logger?.debug({ err: error }, "progress publish failed");
    }
  }

  #validate(propagationSource: PeerId, message: Message): TopicValidatorResult {
    const offer = this.#offer;
    if (offer === undefined) return TopicValidatorResult.Ignore;
    if (message.type !== "signed") return this.#reject("?", "unsigned");
    const origin = message.from.toString();
    if (origin === this.self) return TopicValidatorResult.Ignore;
    let envelope: z.infer<typeof envelopeSchema>;
    try {
      if (message.data.length > MAX_PROGRESS_MESSAGE_BYTES) return this.#reject(origin, "malformed");
      envelope = envelopeSchema.parse(decode(message.data));
    } catch {
      return this.#reject(origin, "malformed");
    }
    let pass: AccessPass;
    try {
      pass = this.#options.passes.verify(envelope.pass, { now: this.#now() });
    } catch (error) {
      this.#options.logger?.debug(
        { origin, via: propagationSource.toString(), err: error },
        "refused a progress record with an invalid pass",
      );
      return this.#reject(origin, "pass");
    }
    if (!sameBytes(pass.peerPublicKey, message.key.raw)) return this.#reject(origin, "key");
    try {
      checkRecordRole(envelope.record, pass.role);
    } catch (error) {
      this.#options.logger?.debug(
        { origin, via: propagationSource.toString(), err: error },
        "refused a progress record that does not fit its pass",
      );
      return this.#reject(origin, "role");
    }
    const last = this.#sequence.get(origin);
    if (last !== undefined && message.sequenceNumber <= last) return TopicValidatorResult.Ignore;
    const outcome = offer({ peerId: origin, pass }, envelope.record);
    if (outcome === "implausible") return this.#reject(origin, "implausible");
    if (outcome === "ignored") return TopicValidatorResult.Ignore;
    this.#sequence.delete(origin);
    this.#sequence.set(origin, message.sequenceNumber);
    if (this.#sequence.size > MAX_REMEMBERED_ORIGINS) {
      const oldest = this.#sequence.keys().next().value;
      if (oldest !== undefined) this.#sequence.delete(oldest);
    }
    return TopicValidatorResult.Accept;
  }

  #reject(origin: string, reason: ProgressRejection): TopicValidatorResult {
    this.#rejections?.(origin, reason);
    return TopicValidatorResult.Reject;
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
