import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuxExitCode, main, type AuxCliEnvironment } from "../src/cli.ts";

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-aux-cli-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `main` with captured output; `onLog` sees each JSON log line as it is written. */
async function run(
  argv: string[],
  env: Record<string, string> = {},
  options: { stop?: AbortController; onLog?: (line: string) => void } = {},
) {
  const out: string[] = [];
  const err: string[] = [];
  const logs: string[] = [];
  const environment: AuxCliEnvironment = {
    env,
    io: { out: (line) => out.push(line), err: (line) => err.push(line) },
    logDestination: {
      write: (line: string) => {
        logs.push(line);
        options.onLog?.(line);
      },
    },
    stopSignal: (options.stop ?? new AbortController()).signal,
  };
  const code = await main(argv, environment);
  return { code, out, err, logs };
}

const valid = ["--server", "http://127.0.0.1:9/", "--token", "aux-token"];

describe("barnraise-aux arguments", () => {
  it("prints the usage for --help and exits 0", async () => {
    for (const flag of ["--help", "-h"]) {
      const result = await run([flag]);
      expect(result.code).toBe(AuxExitCode.ok);
      expect(result.out.join("\n")).toContain("Usage: barnraise-aux --server URL --token AUX_TOKEN");
      expect(result.out.join("\n")).toMatch(
        /--no-evaluate +do not score each checkpoint on the dataset's test split/,
      );
      expect(result.out.join("\n")).toMatch(/--no-validate +do not validate what trainers contribute/);
      expect(result.err).toEqual([]);
    }
  });

  it("exits 64 without --server or --token", async () => {
    const noServer = await run(["--token", "aux-token"]);
    expect(noServer.code).toBe(AuxExitCode.usage);
    expect(noServer.err[0]).toContain("--server is required");

    const noToken = await run(["--server", "http://127.0.0.1:9/"]);
    expect(noToken.code).toBe(AuxExitCode.usage);
    expect(noToken.err[0]).toContain("--token is required");

    const blankToken = await run(["--server", "http://127.0.0.1:9/", "--token", "  "]);
    expect(blankToken.code).toBe(AuxExitCode.usage);
    expect(blankToken.err[0]).toContain("--token is required");
  });

  it("exits 64 for a --server that is not an http(s) URL", async () => {
    const ftp = await run(["--server", "ftp://example.org/", "--token", "aux-token"]);
    expect(ftp.code).toBe(AuxExitCode.usage);
    expect(ftp.err[0]).toContain("must be an http(s) URL");

    const notUrl = await run(["--server", "example.org", "--token", "aux-token"]);
    expect(notUrl.code).toBe(AuxExitCode.usage);
    expect(notUrl.err[0]).toContain("is not a URL");
  });

  it("exits 64 for an unknown log level", async () => {
    const result = await run([...valid, "--log-level", "verbose"]);
    expect(result.code).toBe(AuxExitCode.usage);
    expect(result.err[0]).toContain('unknown log level "verbose"');
  });

  it("exits 64 for an address that is not a multiaddr", async () => {
    for (const option of ["--listen", "--announce", "--peer"]) {
      const result = await run([...valid, option, "127.0.0.1:31337"]);
      expect(result.code).toBe(AuxExitCode.usage);
      expect(result.err[0]).toContain('"127.0.0.1:31337" is not a multiaddr');
    }
  });

  it("exits 64 for an unknown option", async () => {
    const result = await run([...valid, "--frobnicate"]);
    expect(result.code).toBe(AuxExitCode.usage);
    expect(result.err[0]).toContain("--frobnicate");
  });

  it("accepts --no-evaluate, --no-validate and --no-averaging, and refuses a value for them", async () => {
    const stop = new AbortController();
    const result = await run(
      [
        ...valid,
        "--identity",
        join(dir, "flags.json"),
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--no-evaluate",
        "--no-validate",
        "--no-averaging",
      ],
      {},
      {
        stop,
        onLog: (line) => {
          if (line.includes("cannot join yet")) stop.abort();
        },
      },
    );
    expect(result.err).toEqual([]);
    expect(result.code).toBe(AuxExitCode.ok);

    for (const flag of ["--no-evaluate", "--no-validate"]) {
      const valued = await run([...valid, `${flag}=yes`]);
      expect(valued.code).toBe(AuxExitCode.usage);
      expect(valued.err[0]).toContain(flag);
    }
  });

  it("takes the server and token from BARNRAISE_SERVER and BARNRAISE_TOKEN, and stops while joining", async () => {
    const stop = new AbortController();
    const result = await run(
      ["--identity", join(dir, "identity.json"), "--listen", "/ip4/127.0.0.1/tcp/0"],
      { BARNRAISE_SERVER: "http://127.0.0.1:9/", BARNRAISE_TOKEN: "aux-token" },
      {
        stop,
        onLog: (line) => {
          if (line.includes("cannot join yet")) stop.abort();
        },
      },
    );
    expect(result.err).toEqual([]);
    expect(result.code).toBe(AuxExitCode.ok);
    const messages = result.logs.map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toContain("interrupted while joining");
  });
});
