import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPlatformServer, type PlatformServer } from "./support/platform-server.ts";
import { packEchoProgram, writePrograms } from "./support/programs.ts";

/**
 * The install script as a volunteer runs it: `curl -fsSL <platform>/api/v1/programs/install.sh |
 * sh -s -- barnraise-peer --server … --token …`, against the platform served over real HTTP. With
 * Node.js on PATH it downloads the program, checks its SHA-256 and starts it with npx; a tarball
 * that does not match the published SHA-256 never runs.
 */

const run = promisify(execFile);

describe("install.sh", () => {
  let platform: PlatformServer;
  let programsDir: string;
  let home: string;
  let peerFile = "";
  const origin = () => platform.url.origin;

  beforeAll(async () => {
    programsDir = await mkdtemp(join(tmpdir(), "barnraise-programs-"));
    home = await mkdtemp(join(tmpdir(), "barnraise-home-"));
    const [file] = await writePrograms(programsDir, [
      { name: "barnraise-peer", bytes: await packEchoProgram() },
    ]);
    peerFile = file ?? "";
    platform = await startPlatformServer({ env: { BARNRAISE_PROGRAMS_DIR: programsDir } });
  });

  afterAll(async () => {
    await platform.close();
    await rm(programsDir, { recursive: true, force: true });
    await rm(home, { recursive: true, force: true });
  });

  /** `curl … | sh -s -- args` in an empty HOME and npm cache, with this Node.js first on PATH. */
  async function pipeToSh(
    args: readonly string[],
  ): Promise<{ code: number; stdout: string; stderr: string }> {
    const command = `curl -fsSL ${origin()}/api/v1/programs/install.sh | sh -s -- ${args.join(" ")}`;
    const env: NodeJS.ProcessEnv = {
      NODE_ENV: "production",
      HOME: home,
      npm_config_cache: join(home, "npm-cache"),
      npm_config_update_notifier: "false",
      PATH: [dirname(process.execPath), "/usr/bin", "/bin"].join(delimiter),
    };
    try {
      const { stdout, stderr } = await run("sh", ["-c", command], { env, cwd: home });
      return { code: 0, stdout, stderr };
    } catch (error) {
      const failed = error as { code: number; stdout: string; stderr: string };
      return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
    }
  }

  it("downloads the program, checks it and starts it with the volunteer's arguments", async () => {
    const result = await pipeToSh(["barnraise-peer", "--server", origin(), "--token", "brp_x"]);
    expect(result.stderr).toContain(`downloading ${peerFile}`);
    expect(result.stdout).toBe(`echo-program --server ${origin()} --token brp_x\n`);
    expect(result.code).toBe(0);
  });

  it("refuses a tarball that does not match the SHA-256 the platform published", async () => {
    await rm(join(home, ".barnraise", "programs"), { recursive: true, force: true });
    const tampered = await packEchoProgram();
    tampered.writeUInt8(tampered.readUInt8(tampered.length - 1) ^ 0xff, tampered.length - 1);
    await writeFile(join(programsDir, peerFile), tampered);
    const result = await pipeToSh(["barnraise-peer", "--server", origin(), "--token", "brp_x"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("does not match the SHA-256 the platform published");
    expect(result.stdout).not.toContain("echo-program");
  });
});
