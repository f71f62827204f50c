import { parseArgs } from "node:util";
import { IdentityFileError, loadOrCreateIdentity } from "./identity-file.ts";

export interface CommandIo {
  out(line: string): void;
  err(line: string): void;
}

export const processIo: CommandIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** Exit codes shared by the node programs. */
export const ExitCode = { ok: 0, failure: 1, usage: 64 } as const;

export interface NodeCliOptions {
  program: string;
  defaultIdentityPath: string;
}

/**
 * The command line shared by `barnraise-peer` and `barnraise-aux` for what they have in common:
 * `identity` creates or loads the node's identity and prints its PeerId.
 */
export function nodeCli(
  options: NodeCliOptions,
): (argv: readonly string[], io: CommandIo) => Promise<number> {
  const usage = `Usage: ${options.program} <command> [options]

Commands:
  identity    create this node's identity, or load it, and print its PeerId

Options:
  --identity FILE   identity file (default: ${options.defaultIdentityPath})
  -h, --help        show this help`;

  return async (argv, io) => {
    let parsed;
    try {
      parsed = parseArgs({
        args: [...argv],
        allowPositionals: true,
        options: { identity: { type: "string" }, help: { type: "boolean", short: "h" } },
      });
    } catch (error) {
      io.err(`error: ${(error as Error).message}`);
      io.err(usage);
      return ExitCode.usage;
    }
    const [command, ...rest] = parsed.positionals;
    if (parsed.values.help === true) {
      io.out(usage);
      return ExitCode.ok;
    }
    if (command !== "identity" || rest.length > 0) {
      io.err(
        command === undefined
          ? "error: no command given"
          : `error: unknown command "${parsed.positionals.join(" ")}"`,
      );
      io.err(usage);
      return ExitCode.usage;
    }
    return runIdentityCommand(parsed.values.identity ?? options.defaultIdentityPath, io);
  };
}

async function runIdentityCommand(path: string, io: CommandIo): Promise<number> {
  try {
    const identity = await loadOrCreateIdentity(path);
    io.out(`${identity.created ? "created" : "loaded"} identity ${path}`);
    io.out(`PeerId: ${identity.peerId}`);
    return ExitCode.ok;
  } catch (error) {
    if (error instanceof IdentityFileError) {
      io.err(`error: ${error.message}`);
      return ExitCode.failure;
    }
    throw error;
  }
}
