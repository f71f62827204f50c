import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** `barnraise-peer doctor` run as a child process to its end, its checks parsed from --json output. */

const run = promisify(execFile);
const PEER_CLI = fileURLToPath(new URL("../../src/cli.ts", import.meta.url));

export interface Check {
  name: string;
  verdict: "ok" | "warn" | "fail";
  summary: string;
  advice?: string;
}

export interface DoctorRun {
  code: number;
  checks: Check[];
  stdout: string;
}

/** Runs `barnraise-peer doctor args` to its end; with --json among `args`, parses its checks. */
export async function doctor(args: readonly string[], env: Record<string, string> = {}): Promise<DoctorRun> {
  const options = { env: { ...process.env, ...env }, timeout: 120_000 };
  let stdout: string;
  let code = 0;
  try {
    ({ stdout } = await run(process.execPath, [PEER_CLI, "doctor", ...args], options));
  } catch (error) {
    const failed = error as { code: number; stdout: string };
    ({ stdout } = failed);
    code = failed.code;
  }
  const checks = stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Check & { msg: string })
    .filter((record) => record.msg === "doctor check");
  return { code, checks, stdout };
}

export const verdicts = (result: DoctorRun) =>
  Object.fromEntries(result.checks.map((check) => [check.name, check.verdict]));
