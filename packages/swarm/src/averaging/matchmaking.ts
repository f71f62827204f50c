import { toBase64Url } from "@barnraise/protocol";
import { runtimeCrypto } from "@barnraise/protocol/runtime-crypto";
import type { Logger } from "pino";
import { z } from "zod";
import { SwarmError, SwarmErrorCode, isSwarmError } from "../errors.ts";
import { defineMethod, type PeerIdString, type Rpc } from "../rpc/rpc.ts";
import { checkModeFitsRole } from "../p2p/hello.ts";
import { gatheringDeadlineMs } from "./deadlines.ts";
import type { AllReduceGroup, AveragingMode } from "./partition.ts";
import { stallAwareTimeout, type StallAwareTimeout } from "../time/stall-aware-timeout.ts";

/** What a member brings to a group: its mode, weight (samples) and measured bandwidth. */
export interface MemberOffer {
  mode: AveragingMode;
  weight: number;
  uploadBytesPerSecond: number;
  downloadBytesPerSecond: number;
}

export interface FormedMember extends MemberOffer {
  peerId: PeerIdString;
}

export interface FormedGroup extends AllReduceGroup {
  readonly members: readonly FormedMember[];
  readonly leader: PeerIdString;
}

const offerSchema = z.strictObject({
  mode: z.enum(["node", "client", "aux"]),
  weight: z.number().min(0).max(1e15),
  uploadBytesPerSecond: z.number().positive().max(1e12),
  downloadBytesPerSecond: z.number().positive().max(1e12),
});
const keySchema = z.string().min(1).max(200);

export const matchmakingMethod = defineMethod({
  name: "matchmaking",
  request: z.strictObject({
    key: keySchema,
    offer: offerSchema,
    /** The group this peer already got for `key` and is retrying after: never hand it out again. */
    exclude: z.string().max(300).optional(),
    /** Leaders this peer could not reach: the one asked must not redirect it back to them. */
    skipped: z.array(z.string().min(1).max(128)).max(64).optional(),
  }),
  response: z.discriminatedUnion("status", [
    z.strictObject({
      status: z.literal("formed"),
      groupId: z.string().max(300),
      members: z
        .array(offerSchema.extend({ peerId: z.string().min(1).max(128) }))
        .min(1)
        .max(1024),
    }),
    z.strictObject({ status: z.literal("redirect"), leader: z.string().min(1).max(128) }),
  ]),
  maxFrameBytes: 0,
});

export interface MatchmakingOptions {
  rpc: Rpc;
  logger: Logger;
  /**
   * Peers that could lead the group for `key`: connected members that accept connections (not
   * client mode), for a Moshpit grid cell those of the cell, so that each cell has its own leader.
   */
  leaders: (key: string) => PeerIdString[];
  /**
   * The other members this peer expects in the group for `key` (from progress tracking); the
   * leader closes the group as soon as all of them have joined, instead of waiting for the deadline.
   */
  expected: (key: string) => PeerIdString[];
  /**
   * Whether this peer may still ask for `key` (default: always). A leader that has finished the
   * key's epoch then answers at once rather than waiting for itself until the deadline, so a peer
   * asking too late learns quickly that the round is over.
   */
  willJoin?: (key: string) => boolean;
  /**
   * Told when this peer, leading, closes a gathering: who joined, and whom it expected that did
   * not come by the deadline (empty when everyone expected joined or the group was full).
   */
  onClosed?: (key: string, joined: readonly PeerIdString[], missing: readonly PeerIdString[]) => void;
  maxGroupSize: number;
  /**
   * The most a leader waits for the members it expects (`averaging.matchmakingTimeoutMs`); once it
   * has seen a few gatherings it waits three times the recent spread of arrivals instead, if that
   * is shorter (`gatheringDeadlineMs`). A follower waits this long for its leader's answer.
   */
  timeoutMs: number;
  /**
   * How often an open gathering looks again at whom it waits for (default 250 ms): a peer that was
   * expected but has moved past the key's epoch, loaded newer state or left is no longer waited for,
   * so the group closes then rather than at the deadline.
   */
  recheckMs?: number;
  now?: () => number;
}

interface Gathering {
  readonly key: string;
  readonly members: Map<PeerIdString, FormedMember>;
  readonly formed: PromiseWithResolvers<FormedGroup>;
  readonly timer: StallAwareTimeout;
  readonly recheck: NodeJS.Timeout;
  readonly openedAt: number;
  lastJoinAt: number;
  closed: boolean;
}

/** How many redirects a member follows before it gives up on a key's group. */
const MAX_REDIRECTS = 8;

/** How many gatherings' spreads of arrivals the leader remembers. */
const SPREAD_HISTORY = 16;

/**
 * Forms an all-reduce group for one key (epoch, Moshpit round and grid cell). The leader is the
 * lowest PeerId among the peers that accept connections, so every member picks the same one
 * without a vote. Followers send it a long-poll `matchmaking` request; the leader gathers offers
 * until everyone it expects has joined, the group is full, or the deadline passes, then answers
 * every follower with the same member list (sorted by PeerId, so each member derives the same part
 * layout). A peer that is asked to lead but sees a lower PeerId redirects; a leader that cannot be
 * reached is skipped for the next one.
 */
export class Matchmaking {
  readonly #options: MatchmakingOptions;
  readonly #gatherings = new Map<string, Gathering>();
  /**
   * The last group formed per key, when its gathering opened (to tell how late a straggler came)
   * and when it closed (a member whose answer was lost gets it again only while its round may run).
   */
  readonly #recent = new Map<string, { group: FormedGroup; openedAt: number; closedAt: number }>();
  /** The last group this peer got per key, so that a retry asks for a new one. */
  readonly #tried = new Map<string, string>();
  /** How long after opening the last member of recent gatherings arrived (ms), newest last. */
  readonly #spreads: number[] = [];

  constructor(options: MatchmakingOptions) {
    this.#options = options;
  }

  start(): void {
    this.#options.rpc.handle(matchmakingMethod, async (incoming) => {
      const { key, offer, exclude, skipped } = incoming.head;
      const peer = incoming.from.peerId;
      checkModeFitsRole(offer.mode, incoming.from.pass.role, "a matchmaking offer");
      // A lower peer the asker could not reach (frozen, or cut off from it) is no leader for it:
      // sending it back there would split the members that skipped it among several leaders.
      const leader = this.#leaderFor(key, new Set(skipped), true);
      if (leader !== this.#options.rpc.peerId) {
        await incoming.respond({ status: "redirect", leader });
        return;
      }
      const group = await this.#join(key, { ...offer, peerId: peer }, exclude, incoming.signal);
      await incoming.respond({ status: "formed", groupId: group.groupId, members: [...group.members] });
    });
  }

  stop(): void {
    this.#options.rpc.unhandle(matchmakingMethod);
    for (const gathering of this.#gatherings.values()) this.#close(gathering, false);
  }

  /** How long this peer, leading, waits for its next gathering (`gatheringDeadlineMs`). */
  get gatheringDeadlineMs(): number {
    return gatheringDeadlineMs({ recentSpreadsMs: this.#spreads, capMs: this.#options.timeoutMs });
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  #rememberSpread(spreadMs: number): void {
    this.#spreads.push(spreadMs);
    if (this.#spreads.length > SPREAD_HISTORY) this.#spreads.shift();
  }

  /**
   * Joins (or leads) the group for `key`; rejects with NO_GROUP when nobody else came. Calling it
   * again for the same key (a retry after a failed round or an empty group) joins a new group,
   * under the same key, so peers meet again whatever they went through before.
   */
  async form(key: string, offer: MemberOffer, signal?: AbortSignal): Promise<FormedGroup> {
    const group = await this.#form(key, offer, signal);
    this.#tried.set(key, group.groupId);
    if (this.#tried.size > 64) this.#tried.delete(this.#tried.keys().next().value ?? key);
    if (group.members.length < 2) {
      throw new SwarmError(SwarmErrorCode.NO_GROUP, `no group formed for ${key}`);
    }
    return group;
  }

  async #form(key: string, offer: MemberOffer, signal?: AbortSignal): Promise<FormedGroup> {
    const self = this.#options.rpc.peerId;
    const exclude = this.#tried.get(key);
    const skipped = new Set<PeerIdString>();
    const deadline = (this.#options.now ?? Date.now)() + this.#options.timeoutMs;
    const selfCanLead = offer.mode !== "client";
    let leader = this.#leaderFor(key, skipped, selfCanLead);
    let group: FormedGroup | undefined;
    // Redirects are bounded (views of who leads may disagree for a moment); leaders that fail are
    // each skipped once, so a swarm with many unreachable keys below the honest leaders (keys that
    // publish progress and serve nothing) still reaches them.
    for (let redirects = 0; group === undefined && redirects < MAX_REDIRECTS;) {
      if (leader === self) {
        group = await this.#join(key, { ...offer, peerId: self }, exclude, signal);
        break;
      }
      try {
        const remaining = Math.max(100, deadline - (this.#options.now ?? Date.now)());
        const answer = await this.#options.rpc.request(
          leader,
          matchmakingMethod,
          {
            key,
            offer,
            ...(exclude === undefined ? {} : { exclude }),
            ...(skipped.size === 0 ? {} : { skipped: [...skipped].slice(0, 64) }),
          },
          {
            timeoutMs: remaining + 5_000,
            ...(signal === undefined ? {} : { signal }),
          },
        );
        if (answer.status === "redirect") {
          redirects += 1;
          if (answer.leader === leader || skipped.has(answer.leader)) skipped.add(leader);
          leader =
            answer.leader === self || skipped.has(answer.leader)
              ? this.#leaderFor(key, skipped, selfCanLead)
              : answer.leader;
          continue;
        }
        group = { groupId: answer.groupId, members: answer.members, leader, fractions: [] };
      } catch (error) {
        if (signal?.aborted === true)
          throw new SwarmError(SwarmErrorCode.ABORTED, "matchmaking aborted", { cause: error });
        this.#options.logger.debug({ leader, key, err: error }, "matchmaking leader failed; trying the next");
        skipped.add(leader);
        leader = this.#leaderFor(key, skipped, selfCanLead);
      }
    }
    if (group === undefined || !group.members.some((member) => member.peerId === self)) {
      throw new SwarmError(SwarmErrorCode.NO_GROUP, `no group formed for ${key}`);
    }
    return group;
  }

  /** The lowest PeerId among the peers that can lead `key`'s group (and this peer, unless it is a client). */
  #leaderFor(key: string, skipped: ReadonlySet<PeerIdString>, selfCanLead: boolean): PeerIdString {
    const self = this.#options.rpc.peerId;
    const candidates = this.#options.leaders(key).filter((peer) => !skipped.has(peer));
    if (selfCanLead && !skipped.has(self)) candidates.push(self);
    candidates.sort();
    const leader = candidates[0];
    if (leader === undefined)
      throw new SwarmError(SwarmErrorCode.NO_GROUP, "no reachable peer can lead a group");
    return leader;
  }

  async #join(
    key: string,
    member: FormedMember,
    exclude: string | undefined,
    signal?: AbortSignal,
  ): Promise<FormedGroup> {
    // A member asking again (its answer was lost) gets the group it is in; one retrying after that
    // group failed gets a new one. So does a member whose offer is not the one in the group, or who
    // asks after the group's time: a key comes back when the swarm goes back to an older state (its
    // trainers restarted from a checkpoint under a leader that did not), and a restarted member
    // knows nothing of the group it had (nothing to exclude), while the group's round is over here.
    const now = this.#now();
    const recent = this.#recent.get(key);
    if (
      recent !== undefined &&
      recent.group.groupId !== exclude &&
      now - recent.closedAt <= this.#options.timeoutMs &&
      recent.group.members.some(
        (known) =>
          known.peerId === member.peerId && known.mode === member.mode && known.weight === member.weight,
      )
    ) {
      return recent.group;
    }
    let gathering = this.#gatherings.get(key);
    if (gathering === undefined || gathering.closed) {
      // A member's first ask for a key whose group closed without it: it came this late, and the
      // next gatherings wait for such a straggler (within the config's timeout).
      if (recent !== undefined && exclude === undefined) {
        const late = now - recent.openedAt;
        if (late <= 2 * this.#options.timeoutMs) this.#rememberSpread(late);
      }
      const formed = Promise.withResolvers<FormedGroup>();
      formed.promise.catch(() => undefined);
      const created: Gathering = {
        key,
        members: new Map(),
        formed,
        closed: false,
        openedAt: now,
        lastJoinAt: now,
        timer: stallAwareTimeout(() => {
          this.#close(created, false);
        }, this.gatheringDeadlineMs),
        recheck: setInterval(() => {
          this.#closeWhenComplete(created);
        }, this.#options.recheckMs ?? 250),
      };
      gathering = created;
      this.#gatherings.set(key, gathering);
    }
    gathering.members.set(member.peerId, member);
    gathering.lastJoinAt = now;
    this.#closeWhenComplete(gathering);
    const formed = gathering.formed.promise;
    if (signal === undefined) return formed;
    return Promise.race([
      formed,
      new Promise<never>((_, reject) => {
        signal.addEventListener(
          "abort",
          () => {
            reject(new SwarmError(SwarmErrorCode.ABORTED, "matchmaking aborted"));
          },
          { once: true },
        );
      }),
    ]);
  }

  /** Closes the gathering once everyone the progress records expect has joined, or it is full. */
  #closeWhenComplete(gathering: Gathering): void {
    const expected = new Set(this.#options.expected(gathering.key));
    // A leader asking for the key itself is in the gathering already.
    if (this.#options.willJoin?.(gathering.key) ?? true) expected.add(this.#options.rpc.peerId);
    const everyoneIn = [...expected].every((peer) => gathering.members.has(peer));
    if (everyoneIn || gathering.members.size >= this.#options.maxGroupSize) this.#close(gathering, true);
  }

  /** Answers the gathering's members; `complete`: everyone expected came (not the deadline). */
  #close(gathering: Gathering, complete: boolean): void {
    if (gathering.closed) return;
    gathering.closed = true;
    if (complete && gathering.members.size > 1)
      this.#rememberSpread(gathering.lastJoinAt - gathering.openedAt);
    gathering.timer.clear();
    clearInterval(gathering.recheck);
    this.#gatherings.delete(gathering.key);
    const members = [...gathering.members.values()].sort((a, b) =>
      a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0,
    );
    const digest = toBase64Url(
      runtimeCrypto.sha256(new TextEncoder().encode(members.map((member) => member.peerId).join(","))),
    );
    // The nonce makes every gathering's group distinct, even one of the same members under the same
    // key (a retry), so an all-reduce never mistakes it for the round that failed.
    const group: FormedGroup = {
      groupId: `${gathering.key}/${digest.slice(0, 16)}/${toBase64Url(crypto.getRandomValues(new Uint8Array(6)))}`,
      members,
      leader: this.#options.rpc.peerId,
      fractions: [],
    };
    this.#recent.set(gathering.key, { group, openedAt: gathering.openedAt, closedAt: this.#now() });
    const oldest = this.#recent.keys().next();
    if (this.#recent.size > 64 && oldest.done !== true) this.#recent.delete(oldest.value);
    gathering.formed.resolve(group);
    const onClosed = this.#options.onClosed;
    if (onClosed !== undefined) {
      const joined = members.map((member) => member.peerId);
      const missing = complete
        ? []
        : this.#options.expected(gathering.key).filter((peer) => !gathering.members.has(peer));
      onClosed(gathering.key, joined, missing);
    }
  }
}

export function isNoGroup(error: unknown): boolean {
  return isSwarmError(error, SwarmErrorCode.NO_GROUP);
}
