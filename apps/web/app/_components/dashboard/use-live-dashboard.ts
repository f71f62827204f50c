import { useEffect, useState } from "react";
import { apiSources, mergeDashboard, pollDashboard, type DashboardData } from "./live-data.ts";
import { documentVisibility, startPolling } from "./poller.ts";

export const POLL_INTERVAL_MS = 5000;

export interface LiveDashboard {
  readonly data: DashboardData;
  /** Whether the latest poll could not read every part (what is shown is then older). */
  readonly failing: boolean;
  /** Unix milliseconds of the last poll that read everything (first: when the page was rendered). */
  readonly updatedAt: number;
}

/** The dashboard's data, starting from what the server rendered and refreshed while the page is visible. */
export function useLiveDashboard(
  experimentId: string,
  initial: DashboardData,
  renderedAt: number,
): LiveDashboard {
  const [data, setData] = useState(initial);
  const [failing, setFailing] = useState(false);
  const [updatedAt, setUpdatedAt] = useState(renderedAt);

  useEffect(() => {
    const sources = apiSources(experimentId);
    return startPolling({
      intervalMs: POLL_INTERVAL_MS,
      visibility: documentVisibility(),
      poll: async (signal) => {
        const { update, failed } = await pollDashboard(sources, signal);
        if (signal.aborted) return;
        setData((previous) => mergeDashboard(previous, update));
        setFailing(failed);
        if (!failed) setUpdatedAt(Date.now());
      },
    });
  }, [experimentId]);

  return { data, failing, updatedAt };
}

/** The current time, ticking every `periodMs`; starts at `initial` so the first render matches the server's. */
export function useNow(initial: number, periodMs = 1000): number {
  const [now, setNow] = useState(initial);
  useEffect(() => {
    const timer = setInterval(() => {
      setNow(Date.now());
    }, periodMs);
    return () => {
      clearInterval(timer);
    };
  }, [periodMs]);
  return now;
}
