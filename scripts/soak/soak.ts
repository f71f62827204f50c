/**
 * The soak: the demo's swarm for N minutes under chaos (peers killed and restarted, the peers'
 * token revoked and replaced, the aux peer and the platform restarted), then checks that steps only
 * moved forward, that the trainers kept one model, that the leaderboard credits the samples that
 * went into steps, and that the platform logged no error the chaos does not explain. README.md.
 *
 *   node scripts/soak/soak.ts --minutes 30 [--peers 3] [--seed N] [--port 3900] [--data-dir DIR] [--keep]
 */
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Cast } from "./cast.ts";
import { Chaos } from "./chaos.ts";
import { judge } from "./judge.ts";
import { startCast, stopEverything, windDown } from "./lifecycle.ts";
import { Observer } from "./observer.ts";
import { parseSoakOptions, UsageError, type SoakOptions } from "./options.ts";
import { killAllNow } from "./processes.ts";
import { Prng } from "./prng.ts";
import { clock, formatChecks, formatFigures } from "./report.ts";
import { prepareEnvironment } from "./setup.ts";
import { Interrupted, sleep } from "./waits.ts";

const root = resolve(import.meta.dirname, "../..");
/** No chaos in the first and the last minute: the swarm forms, and at the end runs cleanly. */
const QUIET_MS = 60_000;
/** The soak's clock: every line it prints says how long since it began ("+m:ss"). */
const began = Date.now();

async function main(): Promise<number> {
  let options: SoakOptions;
  try {
    options = parseSoakOptions(process.argv.slice(2), root);
    if (
      options.dataDir !== undefined &&
      existsSync(options.dataDir) &&
      readdirSync(options.dataDir).length > 0
    ) {
      throw new UsageError(`--data-dir ${options.dataDir} is not empty: the soak needs a fresh directory`);
    }
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`[soak] ${error.message}`);
    return 64;
  }
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "barnraise-soak-"));
  const logDir = join(dataDir, "logs");
  mkdirSync(logDir, { recursive: true });
  const print = (text: string) => {
    console.log(text);
    appendFileSync(join(logDir, "soak.log"), `${text}\n`);
  };
  const say = (line: string) => {
    print(`[soak ${clock(Date.now() - began)}] ${line}`);
  };
  const controller = new AbortController();
  onInterrupt(() => {
    say("interrupted: stopping every process the soak started");
    controller.abort();
  });
  const command = `node scripts/soak/soak.ts --minutes ${options.minutes} --peers ${options.peers} --seed ${options.seed} --port ${options.port}`;
  say(`${command}  (data and logs in ${dataDir})`);

  let cast: Cast | undefined;
  let code = 2;
  try {
    const env = await prepareEnvironment(root, dataDir, logDir, say, controller.signal);
    cast = new Cast(env, options.port, options.peers);
    code = await soak(cast, options, command, { say, print }, controller.signal);
  } catch (error) {
    if (error instanceof Interrupted) code = 130;
    else
      say(
        `the soak could not run: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
      );
  } finally {
    if (cast !== undefined) await stopEverything(cast);
    killAllNow();
  }
  if (code === 0 && !options.keep) rmSync(dataDir, { recursive: true, force: true });
  else say(`data and logs kept in ${dataDir}`);
  return code;
}

/** Start, soak under chaos, wind down, judge, report. Resolves to the exit code. */
async function soak(
  cast: Cast,
  options: SoakOptions,
  command: string,
  { say, print }: { say: (line: string) => void; print: (text: string) => void },
  signal: AbortSignal,
): Promise<number> {
  await startCast(cast, say, signal);
  const start = Date.now();
  const end = start + options.minutes * 60_000;
  say(
    `the swarm runs for ${options.minutes} minutes, to ${clock(end - began)}; ` +
      `chaos from ${clock(start + QUIET_MS - began)} to ${clock(end - QUIET_MS - began)}`,
  );
  const observer = new Observer(cast);
  const observing = new AbortController();
  signal.addEventListener(
    "abort",
    () => {
      observing.abort();
    },
    { once: true },
  );
  const sampling = observer.run(observing.signal);
  const chaos = new Chaos(cast, new Prng(options.seed), say);
  try {
    await chaos.run({ start: start + QUIET_MS, end: end - QUIET_MS }, signal);
    say("chaos over: the swarm runs cleanly to the end");
    await sleep(Math.max(0, end - Date.now()), signal);
  } finally {
    observing.abort();
    await sampling;
  }
  const ending = await windDown(cast, observer, say, signal);
  const verdict = judge(cast, observer, chaos.records, ending);
  const report = [
    "",
    `result of ${command}`,
    ...formatChecks(verdict.results),
    "",
    ...formatFigures(verdict.figures, began),
    "",
    verdict.pass ? "PASS" : "FAIL",
  ];
  print(report.join("\n"));
  writeFileSync(
    join(cast.env.dataDir, "report.json"),
    JSON.stringify({ command, start, chaos: chaos.records, ...verdict, samples: observer.samples }, null, 2),
  );
  return verdict.pass ? 0 : 1;
}

/** The first Ctrl-C (or SIGTERM) stops gracefully; a second kills every process group at once. */
function onInterrupt(stop: () => void): void {
  let count = 0;
  const handler = () => {
    count += 1;
    if (count === 1) stop();
    else {
      killAllNow();
      process.exit(130);
    }
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, handler);
}

process.on("exit", killAllNow);
process.exit(await main());
