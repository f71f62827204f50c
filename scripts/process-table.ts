// The processes of this machine as Linux's /proc shows them (only this user's are fully readable):
// their parent, process group, state and command line, whether their environment holds an entry,
// which of them listen on a TCP port and which hold a file open. scripts/demo-preflight.ts uses it
// to find what an earlier `npm run demo` left behind, and the demo lifecycle e2e test to kill a
// whole demo at once.
import { readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";

export interface ProcessInfo {
  readonly pid: number;
  readonly ppid: number;
  readonly pgid: number;
  /** R running, S sleeping, D uninterruptible, T stopped, Z zombie, … (see proc(5)). */
  readonly state: string;
  /** The command line, or the kernel's name for it in brackets when there is none (a zombie). */
  readonly command: string;
}

/** Every process /proc lists now; one that ends while it is read is left out. */
export function listProcesses(): ProcessInfo[] {
  const table: ProcessInfo[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const info = readProcess(Number(name));
    if (info !== undefined) table.push(info);
  }
  return table;
}

export function readProcess(pid: number): ProcessInfo | undefined {
  const stat = readOrUndefined(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses, so split after its last ")".
  const close = stat.lastIndexOf(")");
  const comm = stat.slice(stat.indexOf("(") + 1, close);
  const [state = "?", ppid = "0", pgid = "0"] = stat
    .slice(close + 2)
    .split(" ")
    .slice(0, 3);
  const argv = (readOrUndefined(`/proc/${pid}/cmdline`) ?? "").split("\0").filter((arg) => arg !== "");
  return {
    pid,
    ppid: Number(ppid),
    pgid: Number(pgid),
    state,
    command: argv.length > 0 ? argv.join(" ") : `[${comm}]`,
  };
}

/** Whether the process is there and not a zombie (a zombie has exited; only its parent's wait is missing). */
export function isRunning(pid: number): boolean {
  const info = readProcess(pid);
  return info !== undefined && info.state !== "Z";
}

/** The processes whose environment, as they were started with, holds exactly `entry` ("NAME=value"). */
export function processesWithEnvironment(entry: string): ProcessInfo[] {
  return listProcesses().filter((info) => {
    const environ = readOrUndefined(`/proc/${info.pid}/environ`);
    return environ !== undefined && environ.split("\0").includes(entry);
  });
}

/** The parent, its parent, and so on up to (not including) pid 0, from the table's view. */
export function ancestorsOf(pid: number, table: readonly ProcessInfo[] = listProcesses()): ProcessInfo[] {
  const byPid = new Map(table.map((info) => [info.pid, info]));
  const chain: ProcessInfo[] = [];
  let current = byPid.get(pid);
  while (current !== undefined && current.ppid > 0 && chain.length < 1000) {
    const parent = byPid.get(current.ppid);
    if (parent === undefined) break;
    chain.push(parent);
    current = parent;
  }
  return chain;
}

/** The processes (readable by this user) holding a socket that listens on TCP `port`, IPv4 or IPv6. */
export function listenersOn(port: number): ProcessInfo[] {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of (readOrUndefined(table) ?? "").split("\n").slice(1)) {
      // sl local_address rem_address st … inode: local_address is HEXIP:HEXPORT, st 0A is LISTEN.
      const fields = line.trim().split(/\s+/);
      const local = fields[1];
      if (local === undefined || fields[3] !== "0A") continue;
      if (Number.parseInt(local.slice(local.lastIndexOf(":") + 1), 16) === port && fields[9] !== undefined) {
        inodes.add(fields[9]);
      }
    }
  }
  return holdersOf((link) => inodes.has(/^socket:\[(\d+)\]$/.exec(link)?.[1] ?? ""));
}

/** The processes (readable by this user) that have the file at `path` open. */
export function processesWithFileOpen(path: string): ProcessInfo[] {
  let target: string;
  try {
    target = realpathSync(path);
  } catch {
    return [];
  }
  return holdersOf((link) => link === target);
}

/** Processes with an open file descriptor whose link in /proc (a path, or "socket:[inode]") `matches`. */
function holdersOf(matches: (link: string) => boolean): ProcessInfo[] {
  return listProcesses().filter((info) => {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${info.pid}/fd`);
    } catch {
      return false;
    }
    return fds.some((fd) => {
      try {
        return matches(readlinkSync(`/proc/${info.pid}/fd/${fd}`));
      } catch {
        return false;
      }
    });
  });
}

/** "pid 123 (node apps/peer/src/cli.ts …)", shortened for a log line. */
export function describeProcess(info: ProcessInfo): string {
  const command = info.command.length > 100 ? `${info.command.slice(0, 97)}...` : info.command;
  const stopped = info.state === "T" ? ", stopped" : info.state === "D" ? ", in uninterruptible sleep" : "";
  return `pid ${info.pid} (${command}${stopped})`;
}

function readOrUndefined(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}
