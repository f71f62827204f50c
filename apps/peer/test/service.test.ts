import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { main, type PeerCliEnvironment } from "../src/cli.ts";
import {
  launchdPlist,
  systemdArgument,
  systemdUnit,
  type ServiceSpec,
} from "../src/service/service-files.ts";

/**
 * `barnraise-peer service …` through the CLI, in a home directory of its own: the files it
 * writes, the system commands it runs (systemctl and loginctl stand-ins on PATH that record their
 * arguments: a container has no user session of systemd), and systemd's own verdict on the unit.
 */

const run = promisify(execFile);
const TOKEN = "brp_abcdefghijklmnop0123456789";
const dirs: string[] = [];

afterEach(async () => {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

async function setUp(options: { systemdVersion?: number; systemctlFails?: boolean } = {}) {
  const home = await mkdtemp(join(tmpdir(), "barnraise-service-"));
  dirs.push(home);
  const bin = join(home, "bin");
  await mkdir(bin);
  const calls = join(home, "calls.txt");
  const stand = (name: string, body: string) =>
    writeFile(join(bin, name), `#!/bin/sh\necho "${name} $*" >> "${calls}"\n${body}\n`, { mode: 0o755 });
  await stand(
    "systemctl",
    [
      `if [ "$1" = "--version" ]; then echo "systemd ${options.systemdVersion ?? 252} (252.1)"; exit 0; fi`,
      `if [ "$2" = "is-enabled" ]; then echo enabled; exit 0; fi`,
      `if [ "$2" = "is-active" ]; then echo active; exit 0; fi`,
      options.systemctlFails === true
        ? `echo "Failed to connect to bus: No medium found" >&2; exit 1`
        : "exit 0",
    ].join("\n"),
  );
  await stand("loginctl", "echo no");
  // The published program: a directory with cli.js, its package.json and binaries.
  const program = join(home, "npx-cache", "barnraise-peer");
  await mkdir(program, { recursive: true });
  await writeFile(join(program, "cli.js"), "// the bundled peer\n");
  await writeFile(
    join(program, "package.json"),
    JSON.stringify({ name: "barnraise-peer", version: "0.1.0" }),
  );
  await writeFile(join(program, "tfjs-backend-wasm.wasm"), new Uint8Array([0, 97, 115, 109]));
  const out: string[] = [];
  const err: string[] = [];
  const environment: PeerCliEnvironment = {
    env: { HOME: home, USER: "volunteer", PATH: `${bin}:${process.env.PATH ?? ""}` },
    io: { out: (line) => out.push(line), err: (line) => err.push(line) },
    stdout: process.stdout,
    stderr: process.stderr,
    stopSignal: new AbortController().signal,
    abortSignal: new AbortController().signal,
    programPath: join(program, "cli.js"),
  };
  const service = (...argv: string[]) => main(["service", ...argv], environment);
  const recorded = async () => (await readFile(calls, "utf8").catch(() => "")).trim().split("\n");
  return { home, service, out, err, recorded, program };
}

describe("barnraise-peer service", () => {
  it("installs a systemd user unit that runs the same command with the token kept out of it, and enables it", async () => {
    const { home, service, out, recorded } = await setUp();
    await writeFile(join(home, "rules.json"), JSON.stringify({ maxUse: "50%" }));
    const code = await service(
      "install",
      "--server",
      "https://barnraise.example.org",
      "--token",
      TOKEN,
      "--busy-above",
      "60",
      "--config",
      relative(process.cwd(), join(home, "rules.json")),
      "--client",
    );
    expect(code).toBe(0);
    const unitPath = join(home, ".config", "systemd", "user", "barnraise-peer.service");
    const unit = await readFile(unitPath, "utf8");
    expect(unit).not.toContain(TOKEN);
    const execStart = /^ExecStart=(.*)$/m.exec(unit)?.[1] ?? "";
    const programCopy = join(home, ".local", "share", "barnraise", "barnraise-peer", "cli.js");
    expect(execStart).toBe(
      [
        process.execPath,
        programCopy,
        "--server=https://barnraise.example.org",
        "--busy-above=60",
        // A relative path is made absolute: the service runs in the home directory.
        `--config=${join(home, "rules.json")}`,
        "--client",
      ]
        .map(systemdArgument)
        .join(" "),
    );
    // The program is copied where clearing npx's cache cannot take it away.
    expect(await readFile(programCopy, "utf8")).toBe("// the bundled peer\n");
    await stat(join(home, ".local", "share", "barnraise", "barnraise-peer", "tfjs-backend-wasm.wasm"));
    // The token: in a file only its owner reads, which the unit names.
    const envFile = join(home, ".config", "barnraise", "barnraise-peer.env");
    expect(await readFile(envFile, "utf8")).toBe(`BARNRAISE_TOKEN=${TOKEN}\n`);
    expect((await stat(envFile)).mode & 0o777).toBe(0o600);
    expect(unit).toContain(`EnvironmentFile=${envFile}`);
    const log = join(home, ".local", "state", "barnraise", "barnraise-peer.log");
    expect(unit).toContain(`StandardOutput=append:${log}`);
    expect(unit).toMatch(/^Restart=on-failure$/m);
    expect(unit).toMatch(/^RestartPreventExitStatus=10 11 12 13 17 64$/m);
    // systemd 252 has no growing restart delays: the unit does not name the keys it would ignore.
    expect(unit).not.toContain("RestartSteps");
    expect(await recorded()).toEqual([
      "systemctl --version",
      "systemctl --user daemon-reload",
      "systemctl --user enable --now barnraise-peer.service",
      "loginctl show-user volunteer --property=Linger --value",
    ]);
    expect(out.join("\n")).toContain(`Log: ${log}`);
    expect(out.join("\n")).toContain("loginctl enable-linger volunteer");
  });

  it("passes systemd's own check of the unit", async () => {
    const verify = await run("systemd-analyze", ["--version"]).catch(() => undefined);
    if (verify === undefined) return; // no systemd-analyze on this machine: nothing to ask
    const { home, service } = await setUp();
    expect(
      await service(
        "install",
        "--server",
        "https://barnraise.example.org",
        "--token",
        TOKEN,
        "--max-use",
        "40%",
      ),
    ).toBe(0);
    const unitPath = join(home, ".config", "systemd", "user", "barnraise-peer.service");
    const { stdout, stderr } = await run("systemd-analyze", ["verify", unitPath]);
    expect(`${stdout}${stderr}`.trim()).toBe("");
  });

  it("grows the restart delay where systemd can, and quotes what systemd would expand", () => {
    const spec: ServiceSpec = {
      name: "barnraise-peer",
      description: "Barnraise volunteer peer for https://x.example",
      command: [
        "/usr/bin/node",
        "/opt/peer/cli.js",
        "--max-use=50%",
        "--schedule=mon-fri 18:00-08:00",
        'say "$HOME"',
      ],
      token: TOKEN,
      logFile: "/home/v/.local/state/barnraise/barnraise-peer.log",
      workingDirectory: "/home/v",
    };
    const unit = systemdUnit(spec, "/home/v/.config/barnraise/barnraise-peer.env", 255);
    expect(unit).toMatch(/^RestartSteps=6$/m);
    expect(unit).toMatch(/^RestartMaxDelaySec=600s$/m);
    expect(unit).toContain(
      '"/usr/bin/node" "/opt/peer/cli.js" "--max-use=50%%" "--schedule=mon-fri 18:00-08:00" "say \\"$$HOME\\""',
    );
    expect(() => systemdArgument("a\nb")).toThrow(/line break/);
    const agent = launchdPlist(spec, "org.barnraise.barnraise-peer");
    expect(agent).toContain("<key>BARNRAISE_TOKEN</key>");
    expect(agent).toContain("<string>--max-use=50%</string>");
    expect(agent).toMatch(/<key>SuccessfulExit<\/key>\s*<false\/>/);
  });

  it("refuses bad peer options and a missing token before it writes anything", async () => {
    const { home, service, err, recorded } = await setUp();
    expect(
      await service(
        "install",
        "--server",
        "https://barnraise.example.org",
        "--token",
        TOKEN,
        "--max-use",
        "5%",
      ),
    ).toBe(64);
    expect(err.join("\n")).toMatch(/use limit/);
    expect(await service("install", "--server", "https://barnraise.example.org")).toBe(64);
    expect(err.join("\n")).toMatch(/--token is required/);
    expect(
      await service("install", "--server", "https://barnraise.example.org", "--token", TOKEN, "--frobnicate"),
    ).toBe(64);
    expect(await service("restart")).toBe(64);
    await expect(stat(join(home, ".config", "systemd"))).rejects.toThrow();
    expect(await recorded()).toEqual([""]);
  });

  it("says what to run when systemd has no user session, with the files written", async () => {
    const { home, service, err } = await setUp({ systemctlFails: true });
    expect(await service("install", "--server", "https://barnraise.example.org", "--token", TOKEN)).toBe(1);
    expect(err.join("\n")).toMatch(/systemctl --user daemon-reload failed \(Failed to connect to bus/);
    expect(err.join("\n")).toContain(
      "run: systemctl --user daemon-reload && systemctl --user enable --now barnraise-peer.service",
    );
    await stat(join(home, ".config", "systemd", "user", "barnraise-peer.service"));
  });

  it("shows the status, and uninstalls: stops it, removes the unit, the token and the program copy, keeps the log", async () => {
    const { home, service, out, recorded } = await setUp();
    expect(await service("status")).toBe(1);
    expect(out.at(-1)).toMatch(/No service barnraise-peer is installed/);
    await service(
      "install",
      "--server",
      "https://barnraise.example.org",
      "--token",
      TOKEN,
      "--name",
      "run-b",
    );
    const log = join(home, ".local", "state", "barnraise", "run-b.log");
    await writeFile(log, '{"msg":"status","phase":"paused"}\n');
    out.length = 0;
    expect(await service("status", "--name", "run-b")).toBe(0);
    expect(out).toEqual([
      `Service run-b: ${join(home, ".config", "systemd", "user", "run-b.service")}`,
      "  enabled: enabled",
      "  running: active",
      `  log:     ${log}`,
      '  last:    {"msg":"status","phase":"paused"}',
    ]);
    expect(await service("uninstall", "--name", "run-b")).toBe(0);
    await expect(stat(join(home, ".config", "systemd", "user", "run-b.service"))).rejects.toThrow();
    await expect(stat(join(home, ".config", "barnraise", "run-b.env"))).rejects.toThrow();
    await expect(stat(join(home, ".local", "share", "barnraise", "run-b"))).rejects.toThrow();
    await stat(log);
    expect((await recorded()).slice(-2)).toEqual([
      "systemctl --user disable --now run-b.service",
      "systemctl --user daemon-reload",
    ]);
  });
});
