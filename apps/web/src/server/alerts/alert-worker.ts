import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { AppContext } from "../context.ts";
import { scanForAlerts } from "./alert-monitor.ts";
import { deliverDueAlerts, pruneAlertLog } from "./alert-outbox.ts";

/**
 * The platform's alert loop: every few seconds, look for events (alert-monitor.ts) and deliver the
 * outbox's due alerts (alert-outbox.ts); every hour, prune the old delivery log. Each web instance
 * runs one (instrumentation.ts starts it); the database keeps them from announcing or sending
 * anything twice.
 */

export const ALERT_INTERVAL_MS = 5_000;
/** How often a worker prunes the delivery log. */
const PRUNE_INTERVAL_MS = 3600_000;

/** This process's name in delivery leases. */
export const ALERT_INSTANCE_ID = `${hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;

export interface AlertWorker {
  /** This instance's name in delivery leases. */
  readonly id: string;
  /** One pass: scan, then deliver what is due. */
  tick(): Promise<void>;
  /** Stops the loop after the pass under way. */
  stop(): Promise<void>;
}

export function createAlertWorker(ctx: AppContext, id = ALERT_INSTANCE_ID): AlertWorker {
  let prunedAt = Number.NEGATIVE_INFINITY;
  return {
    id,
    async tick() {
      await scanForAlerts(ctx);
      await deliverDueAlerts(ctx, id);
      if (ctx.now() - prunedAt >= PRUNE_INTERVAL_MS) {
        prunedAt = ctx.now();
        await pruneAlertLog(ctx);
      }
    },
    stop: () => Promise.resolve(),
  };
}

/** Runs `createAlertWorker(ctx)` every `intervalMs` until stopped; a failing pass is logged and the next one runs. */
export function startAlertWorker(ctx: AppContext, intervalMs = ALERT_INTERVAL_MS): AlertWorker {
  const worker = createAlertWorker(ctx);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> = Promise.resolve();
  const loop = () => {
    current = worker
      .tick()
      .catch((error: unknown) => {
        ctx.logger.error({ err: error }, "alert pass failed");
      })
      .then(() => {
        if (!stopped) {
          timer = setTimeout(loop, intervalMs);
          timer.unref();
        }
      });
  };
  timer = setTimeout(loop, intervalMs);
  timer.unref();
  ctx.logger.info({ worker: worker.id }, "alert loop started");
  return {
    id: worker.id,
    tick: () => worker.tick(),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current;
    },
  };
}
