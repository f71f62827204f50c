import { execFile } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { promisify } from "node:util";
import { canonicalJson, generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { authorityPinPath, saveAuthorityPin } from "@barnraise/swarm/node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generatePeerToken } from "../../web/src/server/services/peer-tokens.ts";
import { createToken, createUser, setAllowlistStatus } from "../../web/test/support/peer-fixtures.ts";
import { startPlatformServer, type PlatformServer } from "../../web/test/support/platform-server.ts";
import { main, PeerExitCode } from "../src/cli.ts";
import { PeerCliProcess, type LogRecord } from "./support/peer-cli-process.ts";

/**
 * `barnraise-peer`'s failures as a volunteer meets them: each refusal of the platform (unknown or
 * revoked token, not on the allowlist, banned), each answer that does not verify (tampered config or
 * pass, another authority key than the pinned one) and each local problem (no such backend, bad
 * usage) ends with its own exit code and an error record saying what to do; an unreachable platform
 * is retried with backoff, said so, until the volunteer stops the peer.
 *
 * `main` runs in this process with captured streams, against a real platform over HTTP; one case
 * runs the CLI as a child process to prove the code reaches the process's exit status.
 */

const run = promisify(execFile);
const CLI = new URL("../src/cli.ts", import.meta.url).pathname;

/** Small enough that nothing here would take long even if a case got as far as training. */
const config = {
  model: { kind: "mnist-mlp" as const, hiddenUnits: [16] },
  training: { targetBatchSize: 64, localBatchSize: 16, maxSteps: 2 },
};

const ERROR = 50;
const WARN = 40;

let platform: PlatformServer;
let experimentId: string;
let dir: string;

beforeAll(async () => {
  // No dataset is prepared: every case here ends at the join or at the backend, before any download.
  platform = await startPlatformServer();
  experimentId = (await platform.createExperiment(config)).id;
  dir = await mkdtemp(join(tmpdir(), "barnraise-peer-cli-"));
}, 30_000);

afterAll(async () => {
  await platform.close();
  await rm(dir, { recursive: true, force: true });
});

describe("barnraise-peer exit codes", () => {
  it("keep the numbers the help text and scripts rely on", () => {
    expect(PeerExitCode).toEqual({
      ok: 0,
      failure: 1,
      usage: 64,
      badToken: 10,
      notAllowlisted: 11,
      banned: 12,
      tampered: 13,
      backendUnavailable: 14,
      dataset: 15,
      model: 16,
      noPlace: 17,
      interrupted: 130,
    });
  });
});

describe("barnraise-peer usage", () => {
  it.each([
    { argv: [], problem: "--server is required" },
    { argv: ["--server", "http://127.0.0.1:1"], problem: "--token is required" },
    { argv: ["--server", "http://127.0.0.1:1", "--token", " "], problem: "--token is required" },
    { argv: ["--server", "barnraise.example.org", "--token", "t"], problem: "is not a URL" },
    { argv: ["--server", "ftp://barnraise.example.org", "--token", "t"], problem: "not ftp:" },
    { argv: ["--server", "http://a.example", "--token", "t", "--backend", "tpu"], problem: '"tpu"' },
    { argv: ["--server", "http://a.example", "--token", "t", "--batch-size", "0"], problem: "--batch-size" },
    { argv: ["--server", "http://a.example", "--token", "t", "--batch-size", "x"], problem: "--batch-size" },
    { argv: ["--server", "http://a.example", "--token", "t", "--log-level", "loud"], problem: '"loud"' },
    { argv: ["--server", "http://a.example", "--token", "t", "--bogus"], problem: "--bogus" },
    {
      argv: ["--server", "http://a.example", "--token", "t", "--max-use", "5%"],
      problem: "between 10 % and 100 %",
    },
    {
      argv: ["--server", "http://a.example", "--token", "t", "--schedule", "weekends"],
      problem: "--schedule",
    },
    {
      argv: ["--server", "http://a.example", "--token", "t", "--config", "/nonexistent.json"],
      problem: "config file",
    },
    { argv: ["train"], problem: "train" },
  ])("exits 64 naming the problem: $problem", async ({ argv, problem }) => {
    // Were the arguments accepted by mistake, the run would stay off the home directory and the
    // network: its own identity, and stopped before it could dial anything.
    const cli = new CliRun([...argv, ...nodeArgs("usage")]);
    cli.stop.abort();
    cli.abort.abort();
    expect(await cli.exitCode).toBe(PeerExitCode.usage);
    expect(cli.err[0]).toMatch(/^error: /);
    expect(cli.err[0]).toContain(problem);
    expect(cli.err[1]).toBe("Run barnraise-peer --help for the options.");
    // Nothing was started, so nothing was logged.
    expect(cli.stdout.text).toBe("");
  });

  it("prints the usage for --help and exits 0", async () => {
    const cli = new CliRun(["--help"]);
    expect(await cli.exitCode).toBe(PeerExitCode.ok);
    expect(cli.out.join("\n")).toMatch(/^Usage: barnraise-peer --server URL --token TOKEN/);
    expect(cli.out.join("\n")).toContain("10 bad or revoked token");
    expect(cli.err).toEqual([]);
  });

  it("takes the server and the token from the environment", async () => {
    const cli = new CliRun(nodeArgs("env-only"), {
      BARNRAISE_SERVER: platform.url.href,
      BARNRAISE_TOKEN: generatePeerToken().token,
    });
    // Past the usage checks: the platform itself refuses the unknown token.
    expect(await cli.exitCode).toBe(PeerExitCode.badToken);
    expect(cli.failure().code).toBe("TOKEN_INVALID");
  });
});

describe("barnraise-peer identity", () => {
  it("creates an identity, then loads the same PeerId", async () => {
    const file = join(dir, "identity-command", "identity.json");
    const first = new CliRun(["identity", "--identity", file]);
    expect(await first.exitCode).toBe(PeerExitCode.ok);
    expect(first.out[0]).toBe(`created identity ${file}`);
    expect(first.out[1]).toMatch(/^PeerId: 12D3KooW\w+$/);
    const second = new CliRun(["identity", "--identity", file]);
    expect(await second.exitCode).toBe(PeerExitCode.ok);
    expect(second.out[0]).toBe(`loaded identity ${file}`);
    expect(second.out[1]).toBe(first.out[1]);
  });

  it.each([[["identity", "--bogus"]], [["identity", "extra"]]])("answers %j with 64", async (argv) => {
    const cli = new CliRun(argv);
    expect(await cli.exitCode).toBe(PeerExitCode.usage);
    expect(cli.err.join("\n")).toContain("Usage: barnraise-peer");
  });

  it("runs as a program under Node", async () => {
    const file = join(dir, "identity-program", "identity.json");
    const { stdout } = await run(process.execPath, [CLI, "identity", "--identity", file]);
    expect(stdout).toMatch(/^created identity .+\nPeerId: 12D3KooW\w+\n$/);
  });
});

describe("barnraise-peer refused by the platform", () => {
  it("exits 10 for an unknown token and says how to get a good one", async () => {
    const cli = joinAs("unknown-token", generatePeerToken().token);
    expect(await cli.exitCode).toBe(PeerExitCode.badToken);
    const failure = cli.failure();
    expect(failure.code).toBe("TOKEN_INVALID");
    expect(failure.msg).toContain("check that you copied all of it");
    expect(failure.msg).toContain("create a new token on the experiment's page");
  });

  it("exits 10 for a revoked token", async () => {
    const user = await createUser(platform.app);
    await setAllowlistStatus(platform.app, experimentId, user, "approved");
    const token = await createToken(platform.app, experimentId, user);
    await platform.app.db.peerToken.update({ where: { id: token.id }, data: { revokedAt: new Date() } });
    const cli = joinAs("revoked", token.token);
    expect(await cli.exitCode).toBe(PeerExitCode.badToken);
    const failure = cli.failure();
    expect(failure.code).toBe("TOKEN_REVOKED");
    expect(failure.msg).toContain("this token was revoked");
  });

  it("exits 11 when the token's owner is not on the allowlist", async () => {
    const user = await createUser(platform.app);
    await setAllowlistStatus(platform.app, experimentId, user, "pending");
    const token = await createToken(platform.app, experimentId, user);
    const cli = joinAs("pending", token.token);
    expect(await cli.exitCode).toBe(PeerExitCode.notAllowlisted);
    const failure = cli.failure();
    expect(failure.code).toBe("NOT_ALLOWLISTED");
    expect(failure.msg).toContain("ask the organizer to add you to the allowlist");
  });

  it("exits 12 when the token's owner is banned", async () => {
    const { user, token } = await platform.addVolunteer(experimentId);
    await platform.ban(experimentId, user.username);
    const cli = joinAs("banned", token);
    expect(await cli.exitCode).toBe(PeerExitCode.banned);
    const failure = cli.failure();
    expect(failure.code).toBe("BANNED");
    expect(failure.msg).toContain("banned you from this experiment");
  });
});

describe("barnraise-peer given an answer that does not verify", () => {
  it("exits 13 when the config was changed on the way", async () => {
    const { token } = await platform.addVolunteer(experimentId);
    const proxy = await startJoinRewritingProxy(platform.url, (answer) => {
      answer.signedConfig = alterSignedPayload(answer.signedConfig, (payload) => {
        const signed = payload.config as { optimizer: { learningRate: number } };
        signed.optimizer.learningRate = 5;
      });
    });
    try {
      const cli = joinAs("tampered-config", token, proxy.url);
      expect(await cli.exitCode).toBe(PeerExitCode.tampered);
      const failure = cli.failure();
      expect(failure.code).toBe("CONFIG_TAMPERED");
      expect(failure.msg).toContain("refusing to train on it");
    } finally {
      await proxy.close();
    }
  });

  it("exits 13 when the access pass was changed on the way", async () => {
    const { token } = await platform.addVolunteer(experimentId);
    const proxy = await startJoinRewritingProxy(platform.url, (answer) => {
      answer.pass = alterSignedPayload(answer.pass, (payload) => {
        payload.expiresAt = Number(payload.expiresAt) + 86_400_000;
      });
    });
    try {
      const cli = joinAs("tampered-pass", token, proxy.url);
      expect(await cli.exitCode).toBe(PeerExitCode.tampered);
      const failure = cli.failure();
      expect(failure.code).toBe("PASS_INVALID");
      expect(failure.msg).toContain("not signed by the experiment's authority");
    } finally {
      await proxy.close();
    }
  });

  it("exits 13 when the authority key differs from the pinned one, naming the pin file", async () => {
    const { token } = await platform.addVolunteer(experimentId);
    const pinPath = authorityPinPath(identityPath("repinned"));
    await saveAuthorityPin(pinPath, { experimentId, authorityPublicKey: generateKeyPair().publicKey });
    const cli = joinAs("repinned", token);
    expect(await cli.exitCode).toBe(PeerExitCode.tampered);
    const failure = cli.failure();
    expect(failure.code).toBe("AUTHORITY_CHANGED");
    expect(failure.msg).toContain(pinPath);
  });
});

describe("barnraise-peer on this machine and network", () => {
  it.skipIf(resolves("@tensorflow/tfjs-node-gpu"))(
    "exits 14 when --backend gpu cannot load, saying how to get it",
    async () => {
      const { token } = await platform.addVolunteer(experimentId);
      const cli = joinAs("no-gpu", token, platform.url, ["--backend", "gpu"]);
      expect(await cli.exitCode).toBe(PeerExitCode.backendUnavailable);
      const failure = cli.failure();
      expect(failure.code).toBe("BACKEND_UNAVAILABLE");
      expect(failure.msg).toContain("npm install @tensorflow/tfjs-node-gpu");
      // It had joined: the failure is the backend's, not the platform's.
      expect(cli.records.some((record) => record.msg.startsWith("joined experiment"))).toBe(true);
    },
  );

  it("retries an unreachable platform with backoff, says so, and exits 130 when stopped", async () => {
    const cli = joinAs("unreachable", generatePeerToken().token, await unusedLocalUrl());
    const isRetry = (record: LogRecord) => record.level === WARN && record.msg.includes("retrying in");
    await cli.until("two retry warnings", () => cli.records.filter(isRetry).length >= 2);
    const retries = cli.records.filter(isRetry);
    expect(retries.map((record) => record.attempt)).toEqual([1, 2]);
    for (const retry of retries) {
      expect(retry.code).toBe("SERVER_UNREACHABLE");
      expect(retry.msg).toContain("cannot reach the platform");
    }

    cli.stop.abort();
    expect(await cli.exitCode).toBe(PeerExitCode.interrupted);
    expect(cli.records.some((record) => record.level === ERROR)).toBe(false);
  });
});

describe("barnraise-peer as a process", () => {
  it("exits with status 10 for an unknown token", async () => {
    const peer = new PeerCliProcess("process", ["--server", platform.url.href, ...nodeArgs("process")], {
      BARNRAISE_TOKEN: generatePeerToken().token,
    });
    expect((await peer.exited).code).toBe(PeerExitCode.badToken);
    const failure = peer.records.find((record) => record.level === ERROR);
    expect(failure?.code, peer.transcript()).toBe("TOKEN_INVALID");
  });
});

// ---------------------------------------------------------------------------------------------

function identityPath(name: string): string {
  return join(dir, name, "identity.json");
}

/** A node of its own per case: one key registers with one user only. */
function nodeArgs(name: string): string[] {
  return ["--identity", identityPath(name), "--data-dir", join(dir, name, "data")];
}

function joinAs(
  name: string,
  token: string,
  server: URL = platform.url,
  extra: readonly string[] = [],
): CliRun {
  return new CliRun(["--server", server.href, "--token", token, ...nodeArgs(name), ...extra]);
}

/** Captures what the reporter writes; no `fd` and no TTY, so the peer logs JSON lines here. */
class CapturedOutput extends Writable {
  readonly isTTY = false;
  text = "";
  readonly #onWrite: () => void;

  constructor(onWrite: () => void) {
    super();
    this.#onWrite = onWrite;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.text += chunk.toString("utf8");
    this.#onWrite();
    callback();
  }
}

/** One `main` call in this process, with the environment a terminal-less run gets. */
class CliRun {
  readonly out: string[] = [];
  readonly err: string[] = [];
  readonly stdout: CapturedOutput;
  readonly stderr: CapturedOutput;
  readonly stop = new AbortController();
  readonly abort = new AbortController();
  readonly exitCode: Promise<number>;
  #finished = false;
  readonly #waiters = new Set<() => void>();

  constructor(argv: readonly string[], env: Record<string, string> = {}) {
    const notify = () => {
      for (const waiter of this.#waiters) waiter();
    };
    this.stdout = new CapturedOutput(notify);
    this.stderr = new CapturedOutput(notify);
    this.exitCode = main(argv, {
      env,
      io: { out: (line) => this.out.push(line), err: (line) => this.err.push(line) },
      stdout: this.stdout,
      stderr: this.stderr,
      stopSignal: this.stop.signal,
      abortSignal: this.abort.signal,
    });
    const finished = () => {
      this.#finished = true;
      notify();
    };
    this.exitCode.then(finished, finished);
  }

  /** The JSON records logged so far (a line that is not JSON fails the test). */
  get records(): LogRecord[] {
    return this.stdout.text
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => JSON.parse(line) as LogRecord);
  }

  /** The one error record, which must carry a code to branch on. */
  failure(): LogRecord & { code: string } {
    const errors = this.records.filter((record) => record.level === ERROR);
    expect(errors, this.transcript()).toHaveLength(1);
    const [failure] = errors;
    if (failure === undefined || typeof failure.code !== "string") {
      throw new Error(`no error record with a code\n${this.transcript()}`);
    }
    return { ...failure, code: failure.code };
  }

  /** Waits until `ready()` holds, or fails when the run ends first or `timeoutMs` passes. */
  async until(what: string, ready: () => boolean, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!ready()) {
      if (this.#finished) throw new Error(`the peer finished before ${what}\n${this.transcript()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${what} within ${timeoutMs} ms\n${this.transcript()}`);
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.#waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.#waiters.add(done);
      });
    }
  }

  transcript(): string {
    return [...this.err, this.stdout.text, this.stderr.text].join("\n");
  }
}

interface JoinAnswer {
  pass: string;
  signedConfig: string;
}

/**
 * Someone between the peer and the platform: forwards every request, and rewrites the platform's
 * successful answers to `POST /api/v1/join` with `rewrite` before passing them on.
 */
async function startJoinRewritingProxy(
  target: URL,
  rewrite: (answer: JoinAnswer) => void,
): Promise<{ url: URL; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    forward(req, res, target, rewrite).catch(() => res.destroy());
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/`),
    async close() {
      const closed = once(server, "close");
      server.close();
      server.closeAllConnections();
      await closed;
    },
  };
}

async function forward(
  req: IncomingMessage,
  res: ServerResponse,
  target: URL,
  rewrite: (answer: JoinAnswer) => void,
): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const url = new URL(req.url ?? "/", target);
  const upstream = await fetch(url, {
    method: req.method ?? "GET",
    headers: { "content-type": req.headers["content-type"] ?? "application/json" },
    ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }),
  });
  let body = await upstream.text();
  if (req.method === "POST" && url.pathname === "/api/v1/join" && upstream.status === 200) {
    const answer = JSON.parse(body) as JoinAnswer;
    rewrite(answer);
    body = JSON.stringify(answer);
  }
  res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "text/plain" });
  res.end(body);
}

/**
 * A signed token (`payload.signature`) with one field of its payload changed: still well-formed
 * and decodable, so only the signature check can tell.
 */
function alterSignedPayload(token: string, change: (payload: Record<string, unknown>) => void): string {
  const [payload = "", signature = ""] = token.split(".");
  const decoded = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>;
  change(decoded);
  return `${toBase64Url(canonicalJson(decoded))}.${signature}`;
}

/** An address nothing listens on: a port the OS just handed out and took back. */
async function unusedLocalUrl(): Promise<URL> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  server.close();
  await once(server, "close");
  return new URL(`http://127.0.0.1:${port}/`);
}

function resolves(specifier: string): boolean {
  try {
    createRequire(import.meta.url).resolve(specifier);
    return true;
  } catch {
    return false;
  }
}
