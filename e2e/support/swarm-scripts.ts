import { spawn } from "node:child_process";
import { join } from "node:path";
import { expect } from "@playwright/test";
import { toBase64Url, type KeyPair } from "@barnraise/protocol";
import { recordMatcher, type RunningProcess } from "./processes.ts";

/** What a bare swarm node script (`swarm-probe.ts`, `claims-peer.ts`) takes on stdin. */
export interface SwarmScriptInput {
  readonly experimentId: string;
  readonly authorityPublicKey: string;
  readonly pass: string;
  readonly secretKey: KeyPair;
  readonly addresses: readonly string[];
}

/** The 127.0.0.1 addresses a node says it listens on, with its PeerId. */
export async function addressesOf(node: RunningProcess): Promise<string[]> {
  const listening = await node.waitForRecord("listening", recordMatcher("listening"), 60_000);
  const peerId = String(listening.peerId);
  // Its own addresses on this machine: not a relay's address for it (the aux's, with /p2p-circuit).
  const addresses = (listening.addresses as string[]).filter(
    (address) => address.includes("/ip4/127.0.0.1/") && !address.includes("/p2p-circuit"),
  );
  return addresses.map((address) => (address.includes("/p2p/") ? address : `${address}/p2p/${peerId}`));
}

/**
 * Runs `script` (a path under e2e/support) with `input` as JSON on stdin, expects exit code 0 within
 * `timeoutMs`, and returns the JSON lines it printed.
 */
export async function runSwarmScript<T>(
  script: string,
  input: SwarmScriptInput & { readonly seconds?: number },
  timeoutMs: number,
): Promise<T[]> {
  const child = spawn(process.execPath, [join("e2e/support", script)], {
    cwd: join(import.meta.dirname, "../.."),
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, NODE_OPTIONS: "" },
  });
  child.stdin.end(
    JSON.stringify({
      ...input,
      secretKey: toBase64Url(input.secretKey.secretKey),
      addresses: [...input.addresses],
    }),
  );
  let output = "";
  let errors = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  child.stderr.on("data", (chunk: Buffer) => (errors += chunk.toString("utf8")));
  const code = await new Promise<number | null>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${script} did not finish within ${timeoutMs} ms: ${errors}`));
    }, timeoutMs);
    child.on("exit", (exitCode) => {
      clearTimeout(timer);
      resolve(exitCode);
    });
  });
  expect(code, errors).toBe(0);
  return output
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as T);
}
