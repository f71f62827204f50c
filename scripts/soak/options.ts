import { resolve } from "node:path";
import { parseArgs } from "node:util";

/** The soak's command line (README.md). */
export interface SoakOptions {
  /** How long the swarm runs, from the start of the peers to the graceful stop; chaos in between. */
  readonly minutes: number;
  readonly peers: number;
  readonly seed: number;
  readonly port: number;
  /** A fresh directory for this run's data and logs; undefined: a new temporary directory. */
  readonly dataDir: string | undefined;
  /** Keep the data directory after a passing run (a failing run always keeps it). */
  readonly keep: boolean;
}

export const USAGE =
  "usage: node scripts/soak/soak.ts --minutes N [--peers 3] [--seed N] [--port 3900] [--data-dir DIR] [--keep]";

export class UsageError extends Error {
  constructor(message: string) {
    super(`${message}\n${USAGE}`);
    this.name = "UsageError";
  }
}

/** The shortest soak: a minute of warm-up, a minute of chaos and a minute of clean running. */
export const MIN_MINUTES = 3;

export function parseSoakOptions(argv: readonly string[], repoRoot: string): SoakOptions {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        minutes: { type: "string" },
        peers: { type: "string", default: "3" },
        seed: { type: "string" },
        port: { type: "string", default: "3900" },
        "data-dir": { type: "string" },
        keep: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.minutes === undefined) throw new UsageError("--minutes is required");
  const minutes = number("--minutes", values.minutes, MIN_MINUTES, 24 * 60, false);
  const peers = number("--peers", values.peers, 2, 8, true);
  const port = number("--port", values.port, 1, 65535, true);
  const seed =
    values.seed === undefined
      ? Math.floor(Math.random() * 2 ** 31)
      : number("--seed", values.seed, 0, 2 ** 32 - 1, true);
  const dataDir = values["data-dir"] === undefined ? undefined : resolve(values["data-dir"]);
  if (dataDir !== undefined && dataDir === resolve(repoRoot, ".data")) {
    throw new UsageError("--data-dir must not be the demo's .data: the soak needs a fresh directory");
  }
  return { minutes, peers, seed, port, dataDir, keep: values.keep };
}

function number(flag: string, text: string, min: number, max: number, integer: boolean): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new UsageError(`${flag} must be ${integer ? "an integer" : "a number"}, got '${text}'`);
  }
  if (value < min || value > max) throw new UsageError(`${flag} must be from ${min} to ${max}, got ${value}`);
  return value;
}
