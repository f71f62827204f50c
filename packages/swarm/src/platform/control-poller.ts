import { abortableSleep } from "./join-retry.ts";
import { JoinError, JoinErrorCode } from "./join-error.ts";
import { isPlatformRequestError, type PlatformClient, type PlatformRequestError } from "./platform-client.ts";
import { fetchRunControl } from "./run-state-client.ts";

/**
 * Asks the platform for the run control every few seconds (DESIGN §9: the organizer's pause, ban
 * and rollback reach every node within 30 s) and hands each token to `offer` (the swarm's run
 * control board, which verifies it and keeps the newest). When the platform refuses this node
 * itself (banned, removed from the allowlist, token revoked), `onRefused` is told once and polling
 * ends: the node must leave. Other failures (platform down) are logged and retried; the aux peers
 * still spread the last control they have.
 */

export interface ControlPollerOptions {
  readonly client: PlatformClient;
  readonly offer: (token: string) => void;
  readonly onRefused: (error: JoinError) => void;
  /** Told of failures that are retried. */
  readonly onError?: (error: unknown) => void;
  /** Between polls; default 5 s. */
  readonly intervalMs?: number;
}

/** Platform codes that mean this node may no longer take part. */
const REFUSALS: Record<string, JoinErrorCode> = {
  BANNED: JoinErrorCode.BANNED,
  NOT_ALLOWLISTED: JoinErrorCode.NOT_ALLOWLISTED,
  TOKEN_REVOKED: JoinErrorCode.TOKEN_REVOKED,
  FORBIDDEN: JoinErrorCode.NOT_ALLOWLISTED,
  NODE_RETIRED: JoinErrorCode.NODE_RETIRED,
};

export const DEFAULT_CONTROL_POLL_MS = 5_000;

/** Polls until `signal` aborts or the platform refuses the node; never rejects. */
export async function pollRunControl(options: ControlPollerOptions, signal: AbortSignal): Promise<void> {
  const interval = options.intervalMs ?? DEFAULT_CONTROL_POLL_MS;
  // A call, so that the compiler does not assume the signal unchanged across awaits.
  const stopped = () => signal.aborted;
  while (!stopped()) {
    try {
      options.offer(await fetchRunControl(options.client, signal));
    } catch (error) {
      if (stopped()) return;
      const refusal = isPlatformRequestError(error) ? REFUSALS[error.code] : undefined;
      if (refusal !== undefined) {
        const refused = error as PlatformRequestError;
        options.onRefused(
          new JoinError(refusal, refused.message.replace(/^the platform refused: /, ""), {
            platformCode: refused.code,
            ...(refused.status === undefined ? {} : { status: refused.status }),
          }),
        );
        return;
      }
      options.onError?.(error);
    }
    await abortableSleep(interval, signal).catch(() => undefined);
  }
}
