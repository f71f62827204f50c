#!/usr/bin/env node
import { homedir } from "node:os";
import { join } from "node:path";
import { nodeCli, processIo } from "@barnraise/swarm";

/** Exit codes: 0 success, 1 failure, 64 bad usage (EX_USAGE). */
export const main = nodeCli({
  program: "barnraise-aux",
  defaultIdentityPath: join(homedir(), ".barnraise", "aux", "identity.json"),
});

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2), processIo);
}
