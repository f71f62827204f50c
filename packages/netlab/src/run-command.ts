/**
 * Runs a program to completion without a shell and captures its output. The lab drives `ip` and `tc`
 * through these helpers, and `Host.exec` runs commands inside a namespace with them.
 */
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { NetLabError } from "./errors.ts";

/** What a finished process printed and how it ended. */
export interface ProcessResult {
  stdout: string;
  stderr: string;
  /** The exit code, or null when a signal ended the process. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

/** Options for {@link runProcess}. */
export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Written to the process's stdin, which is then closed. */
  input?: string | Uint8Array;
  /** Kill the process (SIGKILL) after this long; the result then has `signal: "SIGKILL"`. */
  timeoutMs?: number;
}

const toolPaths = new Map<string, string>();
const SYSTEM_DIRS = ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin"];

/**
 * The absolute path of a system tool such as `ip`, so commands keep working when a caller passes an
 * environment whose PATH lacks /usr/sbin. Falls back to the bare name (looked up in PATH).
 */
export function systemTool(name: string): string {
  const known = toolPaths.get(name);
  if (known !== undefined) return known;
  let found = name;
  for (const dir of SYSTEM_DIRS) {
    try {
      accessSync(`${dir}/${name}`, constants.X_OK);
      found = `${dir}/${name}`;
      break;
    } catch {
      // not here; try the next directory
    }
  }
  toolPaths.set(name, found);
  return found;
}

/** Runs `file args` to completion; resolves with its output whatever the exit code. */
export function runProcess(
  file: string,
  args: readonly string[],
  options: RunOptions = {},
): Promise<ProcessResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout?.on("data", (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on("data", (chunk: Buffer) => stderr.push(chunk));
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => child.kill("SIGKILL"), options.timeoutMs);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(
        new NetLabError("COMMAND_FAILED", `could not start ${file}: ${error.message}`, { cause: error }),
      );
    });
    child.on("close", (exitCode, signal) => {
      clearTimeout(timer);
      resolve({
        stdout: Buffer.concat(stdout).toString("utf8"),
        stderr: Buffer.concat(stderr).toString("utf8"),
        exitCode,
        signal,
      });
    });
    if (options.input !== undefined && child.stdin !== null) child.stdin.end(options.input);
  });
}

/** Describes a command line for error messages. */
export function describeCommand(file: string, args: readonly string[]): string {
  return [file, ...args]
    .map((part) => (/^[\w@%+=:,./-]+$/.test(part) ? part : JSON.stringify(part)))
    .join(" ");
}

/** Runs `file args` and throws a COMMAND_FAILED `NetLabError` (with stderr) unless it exits with 0. */
export async function runChecked(
  file: string,
  args: readonly string[],
  options: RunOptions = {},
): Promise<string> {
  const result = await runProcess(file, args, options);
  if (result.exitCode !== 0) {
    const how = result.signal === null ? `exit code ${result.exitCode}` : `signal ${result.signal}`;
    const detail = result.stderr.trim() || result.stdout.trim() || "no output";
    throw new NetLabError("COMMAND_FAILED", `${describeCommand(file, args)} failed (${how}): ${detail}`);
  }
  return result.stdout;
}

/** `ip …` as root; throws on failure. */
export function ip(args: readonly string[]): Promise<string> {
  return runChecked(systemTool("ip"), args);
}

/** `tc …` as root; throws on failure. */
export function tc(args: readonly string[]): Promise<string> {
  return runChecked(systemTool("tc"), args);
}
