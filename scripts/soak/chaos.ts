import { EXPERIMENT_ID, VOLUNTEER, type Cast } from "./cast.ts";
import type { Prng } from "./prng.ts";
import type { ManagedProcess } from "./processes.ts";
import { SessionClient, type CreatedToken } from "./session-client.ts";
import { incarnationId, type ChaosKind, type ChaosRecord } from "./types.ts";
import { Interrupted, sleep, StopWaiting, waitFor } from "./waits.ts";

/**
 * The chaos loop: one action every 20–40 s (from the end of the previous one) inside a window, the
 * kinds dealt from a seeded shuffled deck so that the first four actions are one of each kind:
 *
 * - peer: SIGKILL or SIGINT one peer, start it again 1–5 s after it has ended, same identity;
 * - retoken: sign in as the demo volunteer, create a new peer token ("soak") and revoke the one the
 *   peers use, wait for the peers to exit by themselves (code 10), start them all with the new one;
 * - aux: SIGKILL the aux peer and start it again (same identity and token);
 * - platform: SIGKILL the platform's process group and start it again on the same data and port.
 */

type Deal = "peer" | "retoken" | "aux" | "platform";
const FIRST_DECK: readonly Deal[] = ["peer", "retoken", "aux", "platform"];
const DECK: readonly Deal[] = ["peer", "peer", "retoken", "aux", "platform"];

/** About how long each action takes: one is started only if it should end inside the window. */
const TYPICAL_MS: Record<Deal, number> = { peer: 15_000, retoken: 40_000, aux: 15_000, platform: 25_000 };

export const GAP_MS = { min: 20_000, max: 40_000 } as const;
const PEER_PAUSE_MS = { min: 1_000, max: 5_000 } as const;
/** A peer finishes its averaging round on SIGINT; a revoked peer notices within ~30 s. */
const PEER_INTERRUPT_GRACE_MS = 45_000;
const REVOKED_EXIT_GRACE_MS = 45_000;
const KILL_GRACE_MS = 10_000;
const RETOKEN_RETRY_MS = 60_000;

export interface ChaosWindow {
  readonly start: number;
  readonly end: number;
}

export class Chaos {
  readonly records: ChaosRecord[] = [];
  readonly #cast: Cast;
  readonly #rng: Prng;
  readonly #say: (line: string) => void;
  #deck: Deal[];

  constructor(cast: Cast, rng: Prng, say: (line: string) => void) {
    this.#cast = cast;
    this.#rng = rng;
    this.#say = say;
    this.#deck = rng.shuffle(FIRST_DECK);
  }

  /** Runs actions from `window.start` while they fit before `window.end`. */
  async run(window: ChaosWindow, signal: AbortSignal): Promise<void> {
    await sleep(Math.max(0, window.start - Date.now()), signal);
    for (;;) {
      const deal = this.#deal();
      if (Date.now() + TYPICAL_MS[deal] > window.end) return;
      const record = await this.#act(deal, signal);
      this.records.push(record);
      const failure = record.failure === null ? "" : ` — FAILED: ${record.failure}`;
      this.#say(
        `chaos: ${describe(record)} done in ${seconds(record.doneAt - record.startedAt)} s${failure}`,
      );
      const gap = this.#rng.int(GAP_MS.min, GAP_MS.max);
      if (Date.now() + gap > window.end) return;
      await sleep(gap, signal);
    }
  }

  #deal(): Deal {
    if (this.#deck.length === 0) this.#deck = this.#rng.shuffle(DECK);
    return this.#deck.shift() ?? "peer";
  }

  async #act(deal: Deal, signal: AbortSignal): Promise<ChaosRecord> {
    switch (deal) {
      case "peer": {
        const peer = this.#rng.pick(this.#cast.peers);
        const kind: ChaosKind = this.#rng.next() < 0.5 ? "peer-kill" : "peer-interrupt";
        const pauseMs = this.#rng.int(PEER_PAUSE_MS.min, PEER_PAUSE_MS.max);
        return this.#record(kind, peer.spec.name, (note) =>
          this.#restartPeer(peer, kind, pauseMs, note, signal),
        );
      }
      case "retoken":
        return this.#record("retoken", null, (note) => this.#retoken(note, signal));
      case "aux":
        return this.#record("aux-restart", "aux", async () => {
          await this.#cast.aux.stop("SIGKILL", "chaos: aux restart", KILL_GRACE_MS);
          const incarnation = await this.#cast.startAux(signal);
          return { restartedAt: incarnation.startedAt, started: [incarnationId(incarnation)] };
        });
      case "platform":
        return this.#record("platform-restart", "platform", async () => {
          await this.#cast.platform.stop("SIGKILL", "chaos: platform restart", KILL_GRACE_MS);
          const incarnation = await this.#cast.startPlatform(signal);
          return { restartedAt: incarnation.startedAt, started: [incarnationId(incarnation)] };
        });
    }
  }

  /** Runs one action and records it; a failure is recorded, not thrown (Ctrl-C is). */
  async #record(
    kind: ChaosKind,
    target: string | null,
    action: (note: (line: string) => void) => Promise<{ restartedAt: number; started: string[] }>,
  ): Promise<ChaosRecord> {
    const startedAt = Date.now();
    const notes: string[] = [];
    this.#say(`chaos: ${kind}${target === null ? "" : ` ${target}`}`);
    let outcome: { restartedAt: number | null; started: string[] } = { restartedAt: null, started: [] };
    let failure: string | null = null;
    try {
      outcome = await action((line) => {
        notes.push(line);
        this.#say(`chaos:   ${line}`);
      });
    } catch (error) {
      if (error instanceof Interrupted) throw error;
      failure = error instanceof Error ? error.message : String(error);
    }
    return { kind, target, startedAt, doneAt: Date.now(), notes, failure, ...outcome };
  }

  async #restartPeer(
    peer: ManagedProcess,
    kind: ChaosKind,
    pauseMs: number,
    note: (line: string) => void,
    signal: AbortSignal,
  ) {
    const interrupt = kind === "peer-interrupt";
    const inTime = await peer.stop(
      interrupt ? "SIGINT" : "SIGKILL",
      `chaos: ${kind}`,
      interrupt ? PEER_INTERRUPT_GRACE_MS : KILL_GRACE_MS,
      interrupt ? [0] : undefined,
    );
    if (!inTime) note(`${peer.spec.name} did not end in time and was killed`);
    await sleep(pauseMs, signal);
    const incarnation = this.#cast.startPeer(peer);
    note(`${peer.spec.name} started again after ${seconds(pauseMs)} s`);
    return { restartedAt: incarnation.startedAt, started: [incarnationId(incarnation)] };
  }

  async #retoken(note: (line: string) => void, signal: AbortSignal) {
    const cast = this.#cast;
    // The platform may be busy: each call is retried for a while, and a token is created once.
    let created: CreatedToken | undefined;
    const revoked = await waitFor(
      "signing in as the demo volunteer, creating a new token and revoking the peers' one",
      async () => {
        const session = await SessionClient.signIn(cast.url, VOLUNTEER, cast.env.password);
        const tokens = await session.tokens(EXPERIMENT_ID);
        const current = tokens.find(
          (token) =>
            token.revokedAt === null && token.role === "trainer" && cast.peerToken.startsWith(token.prefix),
        );
        if (current === undefined) {
          throw new StopWaiting(`the peers' token is not among ${VOLUNTEER}'s active tokens`);
        }
        created ??= await session.createToken(EXPERIMENT_ID, "soak");
        await session.revokeToken(EXPERIMENT_ID, current.id);
        return current;
      },
      { timeoutMs: RETOKEN_RETRY_MS, intervalMs: 2_000, signal },
    );
    if (created === undefined) throw new Error("no token was created");
    note(`revoked token ${revoked.id} (${revoked.label}), created ${created.id} (soak)`);
    cast.peerToken = created.token;
    const ending = cast.peers.filter((peer) => peer.running);
    for (const peer of ending) peer.expectEnd("token revoked", [10]);
    const outcomes = await Promise.all(
      ending.map(async (peer) => {
        const incarnation = peer.current;
        if (incarnation === undefined) return true;
        return peer.ensureGone(
          incarnation,
          REVOKED_EXIT_GRACE_MS,
          `did not exit within ${REVOKED_EXIT_GRACE_MS / 1000} s after its token was revoked`,
        );
      }),
    );
    const late = ending.filter((_, i) => outcomes[i] === false).map((peer) => peer.spec.name);
    const codes = ending.map((peer) => `${peer.spec.name}: ${exitText(peer)}`);
    note(`the peers ended: ${codes.join(", ")}${late.length === 0 ? "" : `; killed: ${late.join(", ")}`}`);
    const started = cast.peers.map((peer) => cast.startPeer(peer));
    return { restartedAt: Math.max(...started.map((i) => i.startedAt)), started: started.map(incarnationId) };
  }
}

function exitText(peer: ManagedProcess): string {
  const exit = peer.current?.exit;
  if (exit === null || exit === undefined) return "running";
  return exit.signal === null ? `exit ${exit.code}` : exit.signal;
}

export function describe(record: Pick<ChaosRecord, "kind" | "target">): string {
  return record.target === null || record.kind === "platform-restart" || record.kind === "aux-restart"
    ? record.kind
    : `${record.kind} ${record.target}`;
}

function seconds(ms: number): string {
  return (ms / 1000).toFixed(1);
}
