import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ProcessSet, RunningProcess } from "./processes.ts";

/**
 * `barnraise-aux` and `barnraise-peer` as a volunteer or an organizer runs them: the CLIs from the
 * repository's sources on this Node.js, listening on loopback, with JSON logs on stdout.
 */

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

/** `barnraise-peer`'s exit codes for the refusals a story checks (PeerExitCode in apps/peer/src/cli.ts). */
export const PeerExit = {
  ok: 0,
  badToken: 10,
  notAllowlisted: 11,
  banned: 12,
} as const;

export interface NodeProcessOptions {
  /** The platform's URL. */
  readonly server: string;
  readonly token: string;
  /** This node's directory: its identity and cached data live under it. */
  readonly dir: string;
}

/** The organizer's aux peer, with its stable identity and data under `dir`. */
export function startAux(processes: ProcessSet, name: string, options: NodeProcessOptions): RunningProcess {
  return processes.start({
    name,
    command: process.execPath,
    args: [
      "apps/aux/src/cli.ts",
      "--server",
      options.server,
      "--token",
      options.token,
      "--listen",
      "/ip4/127.0.0.1/tcp/0",
      "--identity",
      join(options.dir, "identity.json"),
      "--data-dir",
      options.dir,
      "--json",
    ],
    cwd: repoRoot,
    env: childEnv({}),
  });
}

/**
 * A volunteer's peer on the WASM backend with a minibatch of `batchSize`. The token travels in
 * BARNRAISE_TOKEN, as the volunteer page recommends; the peer finds the swarm through the join
 * response's aux addresses.
 */
export function startPeer(
  processes: ProcessSet,
  name: string,
  options: NodeProcessOptions & {
    readonly batchSize: number;
    /** More of the volunteer's flags (their rules for the machine, say). */
    readonly args?: readonly string[];
  },
): RunningProcess {
  return processes.start({
    name,
    command: process.execPath,
    args: [
      "apps/peer/src/cli.ts",
      "--server",
      options.server,
      "--backend",
      "wasm",
      "--batch-size",
      String(options.batchSize),
      "--listen",
      "/ip4/127.0.0.1/tcp/0",
      "--identity",
      join(options.dir, "identity.json"),
      "--data-dir",
      join(options.dir, "data"),
      "--json",
      ...(options.args ?? []),
    ],
    cwd: repoRoot,
    env: childEnv({ BARNRAISE_TOKEN: options.token }),
  });
}

/**
 * An attacker's peer (`support/attacker-peer.ts`): the volunteer's peer on the WASM backend with a
 * minibatch of `batchSize`, whose every contribution to averaging is multiplied by `scale`.
 */
export function startAttackerPeer(
  processes: ProcessSet,
  name: string,
  options: NodeProcessOptions & { readonly batchSize: number; readonly scale: number },
): RunningProcess {
  return processes.start({
    name,
    command: process.execPath,
    args: [
      "e2e/support/attacker-peer.ts",
      "--server",
      options.server,
      // Joined to its value: parseArgs would read a negative factor as an option.
      `--scale=${options.scale}`,
      "--batch-size",
      String(options.batchSize),
      "--identity",
      join(options.dir, "identity.json"),
      "--data-dir",
      join(options.dir, "data"),
    ],
    cwd: repoRoot,
    env: childEnv({ BARNRAISE_TOKEN: options.token }),
  });
}

/**
 * The test runner's environment for a CLI: this Node.js first on PATH, without the runner's own
 * NODE_OPTIONS (its loader is for the tests, not for the product), plus `extra`.
 */
function childEnv(extra: Readonly<Record<string, string>>): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {
    ...process.env,
    PATH: [dirname(process.execPath), process.env.PATH ?? ""].join(delimiter),
    ...extra,
  };
  delete env.NODE_OPTIONS;
  if (extra.BARNRAISE_TOKEN === undefined) delete env.BARNRAISE_TOKEN;
  return env;
}
