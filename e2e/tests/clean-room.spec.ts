import { mkdir } from "node:fs/promises";
import { delimiter, dirname, join } from "node:path";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { expect, test, type Page } from "@playwright/test";
import { recordMatcher, type RunningProcess } from "../support/processes.ts";
import { baseURL, e2eRun } from "../support/run-env.ts";
import {
  createAuxToken,
  createPeerToken,
  leaderboardSamples,
  programCommandPattern,
  publishRun,
  shownCommand,
} from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { register } from "../support/ui.ts";

// A volunteer's first run on a fresh machine, as the pages tell it: the organizer copies the aux
// command from the manage page and the volunteer the peer command from the volunteer page, and each
// runs that exact string in a clean room: a network namespace whose only way out is the platform
// (reachable at the same localhost URL the pages show), an empty HOME and npm cache, no repository on
// PATH, only Node.js. npx fetches the programs from the platform; the peer joins and its samples
// reach the leaderboard. Needs root for the namespace (CI runs as root).

let lab: NetLab | undefined;
// The programs run under npx, which starts them as its children: ending the namespace ends them all.
const { processes, contexts, workDir } = processStory("clean-room", {
  beforeStop: async () => {
    await lab?.destroy();
  },
});

test("the commands the pages show run on a machine with only Node.js and reach only the platform", async ({
  browser,
  request,
}, testInfo) => {
  test.setTimeout(5 * 60_000);
  const available = await netlabAvailable();
  if (!available.ok) throw new Error(`the clean room needs a network namespace: ${available.reason}`);
  const suffix = Date.now().toString(36);
  const organizerName = `organizer-${suffix}`;
  const volunteerName = `clara-${suffix}`;
  const experimentId = `clean-${suffix}`;

  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const organizer = await newPage();
  const volunteer = await newPage();

  let room: Host | undefined;
  await test.step("a clean room whose network reaches only the platform", async () => {
    lab = await NetLab.create();
    room = await lab.addHost({ name: "home" });
    await lab.exposeOutside(
      room,
      e2eRun.webPort,
      { host: "127.0.0.1", port: e2eRun.webPort },
      { address: "127.0.0.1" },
    );
  });

  /**
   * Runs a command copied from a page in the clean room, as its user would paste it into a shell, in
   * the home directory of `machine` (commands on one machine share it).
   */
  const runInRoom = async (name: string, command: string, machine = name): Promise<RunningProcess> => {
    if (room === undefined) throw new Error("no clean room");
    const home = join(workDir(), machine);
    await mkdir(home, { recursive: true });
    const line = room.commandLine("sh", ["-c", command]);
    return processes.start({
      name,
      command: line.command,
      args: line.args,
      cwd: home,
      env: {
        HOME: home,
        npm_config_cache: join(home, ".npm"),
        PATH: [dirname(process.execPath), "/usr/local/bin", "/usr/bin", "/bin"].join(delimiter),
        LANG: "C.UTF-8",
      },
    });
  };

  let aux: RunningProcess | undefined;
  await test.step("the organizer runs the aux command the manage page shows", async () => {
    await register(organizer, organizerName);
    await register(volunteer, volunteerName);
    await publishRun(organizer, {
      id: experimentId,
      name: `Clean room ${suffix}`,
      targetBatch: 256,
      localBatch: 32,
      checkpointEvery: 1000,
    });
    await organizer.getByLabel("Add a volunteer by username").fill(volunteerName);
    await organizer.getByRole("button", { name: "Add to allowlist" }).click();
    await expect(organizer.getByTestId(`allowlist-${volunteerName}`)).toBeVisible();
    const auxToken = await createAuxToken(organizer, "clean-room aux");
    const auxCommand = await shownCommand(organizer, "New aux token");
    expect(auxCommand).toMatch(programCommandPattern("barnraise-aux", baseURL, auxToken));
    aux = await runInRoom("aux", auxCommand);
    await aux.waitForRecord("registered address", recordMatcher("registered address"), 120_000);
  });

  await test.step("the volunteer runs the peer command the volunteer page shows; its samples count", async () => {
    const token = await createPeerToken(volunteer, experimentId, "fresh laptop");
    const command = await shownCommand(volunteer, "New token");
    expect(command).toMatch(programCommandPattern("barnraise-peer", baseURL, token));
    // First the check the page suggests next to the command: this machine can contribute.
    const doctorCommand =
      (await volunteer
        .getByRole("region", { name: "New token" })
        .getByLabel("the doctor command")
        .textContent()) ?? "";
    expect(doctorCommand).toBe(command.replace(" --server ", " doctor --server "));
    const checked = await runInRoom("doctor", doctorCommand, "laptop");
    expect(await checked.waitForExit(120_000), checked.tail(30)).toEqual({ code: 0, signal: null });
    expect(checked.tail(30)).toContain("This machine can contribute");
    // The served program has no WebGPU binding of its own: the doctor fetched it from the platform.
    expect(checked.tail(30)).toMatch(/… fetching the WebGPU binding for \S+: dawn\.node, [\d.]+ MiB/);
    expect(checked.tail(30)).toMatch(/✓ swarm +reachable at/);

    const started = Date.now();
    const peer = await runInRoom("peer", command, "laptop");
    const joined = await peer.waitForRecord("joined", recordMatcher(/^joined experiment/), 120_000);
    expect(joined.experimentId).toBe(experimentId);
    // The bundle carries the wasm backend's binaries; WebGPU's binding (Dawn) is fetched from the
    // platform (the doctor above already did, into the same data directory). Both run here, and
    // the peer keeps whichever it measured faster (wasm, on this room's software rasterizer).
    await peer.waitForRecord(
      "backend",
      recordMatcher(/^backend: (wasm|webgpu) .* GFLOP\/s; .*(wasm|webgpu): measured [\d.]+ GFLOP\/s against/),
      60_000,
    );
    await expect
      .poll(() => leaderboardSamples(request, experimentId, volunteerName), {
        timeout: 150_000,
        intervals: [1_000],
      })
      .toBeGreaterThan(0);
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    testInfo.annotations.push({
      type: "first contributed sample",
      description: `${seconds} s after the command`,
    });
    process.stdout.write(`[clean-room] the peer command's first contributed sample after ${seconds} s\n`);
  });
});
