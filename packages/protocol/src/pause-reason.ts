import { z } from "zod";

/**
 * Why a volunteer's machine holds training, in the volunteer's own rules (DESIGN §1): they paused
 * it, the browser tab is hidden, someone uses the machine, other programs keep the CPU busy, it
 * runs on battery, the schedule says not now, the GPU is too hot. A paused trainer says so in its
 * progress records, the aux passes it on to the platform, and My nodes shows it.
 */
export const PAUSE_REASONS = [
  "volunteer",
  "hidden",
  "in-use",
  "busy",
  "battery",
  "schedule",
  "too-hot",
] as const;
export type PauseReason = (typeof PAUSE_REASONS)[number];

/** Each reason as the status line, the page and My nodes say it. */
export const PAUSE_REASON_TEXT: Readonly<Record<PauseReason, string>> = {
  volunteer: "by you",
  hidden: "this tab is hidden",
  "in-use": "machine in use",
  busy: "other programs keep the CPU busy",
  battery: "on battery",
  schedule: "outside the schedule",
  "too-hot": "too hot",
};

/** A non-empty list of distinct reasons, as records and reports carry them. */
export const pauseReasonsSchema = z
  .array(z.enum(PAUSE_REASONS))
  .min(1)
  .max(PAUSE_REASONS.length)
  .refine((reasons) => new Set(reasons).size === reasons.length, "must not repeat a reason");
