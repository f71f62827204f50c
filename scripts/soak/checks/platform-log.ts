import type { ChaosKind, ChaosRecord, CheckResult, ErrorLine } from "../types.ts";
import { iso, shorten } from "./format.ts";

/** How long after an action an error line counts as its doing. */
export const EXPLAINS_MS: Record<ChaosKind, number> = {
  "platform-restart": 30_000,
  "aux-restart": 30_000,
  retoken: 15_000,
  "peer-kill": 15_000,
  "peer-interrupt": 15_000,
};

/** Every error-level line, "during chaos" when inside an action's window, else unexplained (FAIL). */
export function checkPlatformLog(errors: readonly ErrorLine[], chaos: readonly ChaosRecord[]): CheckResult {
  const classified = errors.map((error) => {
    const cause = chaos.find(
      (record) =>
        error.time >= record.startedAt - 1_000 && error.time <= record.doneAt + EXPLAINS_MS[record.kind],
    );
    return { error, cause };
  });
  const unexplained = classified.filter((entry) => entry.cause === undefined);
  return {
    name: "platform log",
    pass: unexplained.length === 0,
    summary: `${errors.length} error-level line(s): ${errors.length - unexplained.length} during chaos, ${unexplained.length} unexplained`,
    details: classified.map(({ error, cause }) => {
      const label = cause === undefined ? "UNEXPLAINED" : `during ${cause.kind} at ${iso(cause.startedAt)}`;
      return `${label}: ${iso(error.time)} ${error.file}: ${shorten(error.text)}`;
    }),
  };
}
