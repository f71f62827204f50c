/**
 * One host of a lab: a network namespace with one interface per subnet it is on. Commands run in it
 * through `ip netns exec`, which changes only the network (and /sys) view, so files, PATH and the
 * environment are those of the caller.
 */
import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { NetLabError } from "./errors.ts";
import { describeCommand, runProcess, systemTool, type ProcessResult } from "./run-command.ts";

/** Options for {@link Host.exec}. */
export interface HostExecOptions {
  /** Added to (and overriding) the caller's environment. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Written to the command's stdin. */
  input?: string | Uint8Array;
  /** SIGKILL the command after this long. */
  timeoutMs?: number;
  /** Throw COMMAND_FAILED when the command does not exit with 0 (default true). */
  reject?: boolean;
}

/** Options for {@link Host.spawn}. */
export interface HostSpawnOptions {
  /** Added to (and overriding) the caller's environment. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** As for `child_process.spawn`; default `["ignore", "pipe", "pipe"]`. */
  stdio?: StdioOptions;
}

/** What a host needs from its lab: refuse work after destroy, and remember spawned processes. */
export interface HostRuntime {
  assertAlive(what: string): void;
  track(child: ChildProcess): void;
}

/** A host in a {@link NetLab}; made by `lab.addHost()` / `lab.addRouter()`. */
export class Host {
  /** The name given to `addHost`. */
  readonly name: string;
  /** The network namespace (`ip netns`) the host lives in. */
  readonly namespace: string;
  readonly #runtime: HostRuntime;
  readonly #addresses: ReadonlyMap<string, string>;
  readonly #firstSubnet: string;

  /** @internal The lab keeps `addresses` and adds to it when the host joins another subnet. */
  constructor(
    init: { name: string; namespace: string; subnet: string; addresses: ReadonlyMap<string, string> },
    runtime: HostRuntime,
  ) {
    this.name = init.name;
    this.namespace = init.namespace;
    this.#firstSubnet = init.subnet;
    this.#addresses = init.addresses;
    this.#runtime = runtime;
  }

  /** The IPv4 address on the host's first subnet. */
  get address(): string {
    return this.addressOn(this.#firstSubnet);
  }

  /** Every subnet the host is on, with its IPv4 address there. */
  get addresses(): ReadonlyMap<string, string> {
    return this.#addresses;
  }

  /** The host's IPv4 address on `subnet`; throws INVALID_ARGUMENT if it is not on that subnet. */
  addressOn(subnet: string): string {
    const address = this.#addresses.get(subnet);
    if (address === undefined) {
      const on = [...this.#addresses.keys()].join(", ");
      throw new NetLabError(
        "INVALID_ARGUMENT",
        `host ${this.name} is not on subnet "${subnet}" (it is on: ${on})`,
      );
    }
    return address;
  }

  /** Runs `cmd args` inside the host's namespace to completion and returns its output. */
  async exec(
    cmd: string,
    args: readonly string[] = [],
    options: HostExecOptions = {},
  ): Promise<ProcessResult> {
    this.#runtime.assertAlive(`exec ${cmd} on ${this.name}`);
    const runOptions = {
      env: { ...process.env, ...options.env },
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      ...(options.input === undefined ? {} : { input: options.input }),
      ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
    };
    const result = await runProcess(
      systemTool("ip"),
      ["netns", "exec", this.namespace, cmd, ...args],
      runOptions,
    );
    if ((options.reject ?? true) && result.exitCode !== 0) {
      const how = result.signal === null ? `exit code ${result.exitCode}` : `signal ${result.signal}`;
      const detail = result.stderr.trim() || "no stderr";
      throw new NetLabError(
        "COMMAND_FAILED",
        `${describeCommand(cmd, args)} on ${this.name} failed (${how}): ${detail}`,
      );
    }
    return result;
  }

  /**
   * Starts `cmd args` inside the host's namespace and returns the running process. The lab ends it
   * (and anything else left in the namespace) on `destroy()`.
   */
  spawn(cmd: string, args: readonly string[] = [], options: HostSpawnOptions = {}): ChildProcess {
    this.#runtime.assertAlive(`spawn ${cmd} on ${this.name}`);
    const line = this.commandLine(cmd, args);
    const child = spawn(line.command, line.args, {
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
      stdio: options.stdio ?? ["ignore", "pipe", "pipe"],
    });
    this.#runtime.track(child);
    return child;
  }

  /**
   * The command line that runs `cmd args` inside the host's namespace, for a caller that starts
   * and watches the process itself (the lab still ends it on `destroy()`).
   */
  commandLine(cmd: string, args: readonly string[] = []): { command: string; args: string[] } {
    return { command: systemTool("ip"), args: ["netns", "exec", this.namespace, cmd, ...args] };
  }

  /** Starts a Node script (`.js` or `.ts`) in the namespace with the same Node binary as the caller. */
  spawnNode(script: string, args: readonly string[] = [], options: HostSpawnOptions = {}): ChildProcess {
    return this.spawn(process.execPath, [script, ...args], options);
  }

  /** Runs a Node script in the namespace to completion (see {@link exec}). */
  execNode(
    script: string,
    args: readonly string[] = [],
    options: HostExecOptions = {},
  ): Promise<ProcessResult> {
    return this.exec(process.execPath, [script, ...args], options);
  }
}
