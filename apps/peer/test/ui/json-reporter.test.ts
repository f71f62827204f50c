import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createReporter, parseLogLevel } from "../../src/ui/create-reporter.ts";
import { createJsonReporter, statusRecord } from "../../src/ui/json-reporter.ts";
import type { PeerStatus } from "@barnraise/volunteer";

/** Captures what the reporter writes; every write must be exactly one JSON line. */
class FakeDestination {
  readonly writes: string[] = [];

  write(line: string): boolean {
    this.writes.push(line);
    return true;
  }

  records(): Record<string, unknown>[] {
    return this.writes.map((line) => {
      expect(line.endsWith("\n")).toBe(true);
      expect(line.slice(0, -1)).not.toContain("\n");
      return JSON.parse(line) as Record<string, unknown>;
    });
  }
}

class FakeClock {
  time = 1_700_000_000_000;
  readonly now = (): number => this.time;
}

function status(overrides: Partial<PeerStatus> = {}): PeerStatus {
  return {
    phase: "training",
    step: 12,
    globalSamples: 628,
    targetBatchSize: 1024,
    etaSeconds: 4.2,
    localSamplesPerSecond: 850.5,
    samplesContributed: 5000,
    peersOnline: 3,
    loss: 0.42,
    ...overrides,
  };
}

describe("createJsonReporter", () => {
  it("writes log() calls as pino JSON lines with the standard fields", () => {
    const destination = new FakeDestination();
    const clock = new FakeClock();
    const reporter = createJsonReporter({ destination, now: clock.now });
    reporter.log("info", "joined the swarm", { peers: 3 });
    reporter.log("warn", "pass refresh failed", { err: new Error("timed out") });
    reporter.log("error", "stopping");
    const [joined, failed, stopping] = destination.records();
    expect(joined).toEqual({
      level: 30,
      time: clock.time,
      pid: process.pid,
      hostname: hostname(),
      peers: 3,
      msg: "joined the swarm",
    });
    expect(failed).toMatchObject({ level: 40, msg: "pass refresh failed", err: { message: "timed out" } });
    expect(stopping).toMatchObject({ level: 50, msg: "stopping" });
  });

  it("sends the swarm logger's records to the same destination, filtered by level", () => {
    const destination = new FakeDestination();
    const reporter = createJsonReporter({ destination, now: new FakeClock().now });
    reporter.logger.debug("dropped at the default info level");
    reporter.logger.child({ component: "averager" }).info({ groupSize: 4 }, "round done");
    expect(destination.records()).toEqual([
      expect.objectContaining({ level: 30, component: "averager", groupSize: 4, msg: "round done" }),
    ]);

    const verbose = new FakeDestination();
    createJsonReporter({ destination: verbose, level: "debug" }).logger.debug("kept");
    expect(verbose.records()).toEqual([expect.objectContaining({ level: 20, msg: "kept" })]);

    const quiet = new FakeDestination();
    const quietReporter = createJsonReporter({ destination: quiet, level: "warn" });
    quietReporter.log("info", "dropped");
    quietReporter.logger.info("dropped too");
    expect(quiet.writes).toEqual([]);
  });

  it("writes a status record at once, then at most once per interval", () => {
    const destination = new FakeDestination();
    const clock = new FakeClock();
    const reporter = createJsonReporter({ destination, now: clock.now, statusIntervalMs: 10_000 });
    reporter.status(status());
    clock.time += 5_000;
    reporter.status(status({ globalSamples: 700 }));
    clock.time += 4_999;
    reporter.status(status({ globalSamples: 800 }));
    expect(destination.writes).toHaveLength(1);
    clock.time += 1;
    reporter.status(status({ globalSamples: 900 }));
    const records = destination.records();
    expect(records).toHaveLength(2);
    expect(records[0]).toMatchObject({
      level: 30,
      msg: "status",
      phase: "training",
      step: 12,
      globalSamples: 628,
      targetBatchSize: 1024,
      etaSeconds: 4.2,
      localSamplesPerSecond: 850.5,
      samplesContributed: 5000,
      peersOnline: 3,
      loss: 0.42,
    });
    expect(records[1]).toMatchObject({ msg: "status", globalSamples: 900, time: clock.time });
  });

  it("writes a status record at once on every phase change", () => {
    const destination = new FakeDestination();
    const clock = new FakeClock();
    const reporter = createJsonReporter({ destination, now: clock.now });
    reporter.status(status());
    clock.time += 1;
    reporter.status(status({ phase: "averaging" }));
    clock.time += 1;
    reporter.status(status({ phase: "averaging" }));
    clock.time += 1;
    reporter.status(status({ phase: "training", step: 13 }));
    expect(destination.records().map((record) => [record.phase, record.step])).toEqual([
      ["training", 12],
      ["averaging", 12],
      ["training", 13],
    ]);
  });

  it("writes non-finite numbers and a missing loss as null, keeping the line valid JSON", () => {
    const destination = new FakeDestination();
    const reporter = createJsonReporter({ destination, now: new FakeClock().now });
    reporter.status(
      status({
        etaSeconds: Infinity,
        localSamplesPerSecond: Number.NaN,
        globalSamples: -Infinity,
        loss: undefined,
      }),
    );
    const [record] = destination.records();
    expect(record).toMatchObject({
      etaSeconds: null,
      localSamplesPerSecond: null,
      globalSamples: null,
      loss: null,
    });
    expect(destination.writes[0]).not.toMatch(/Infinity|NaN/u);
  });

  it("maps a status to a record of exactly the contract's fields, nulls for what JSON cannot hold", () => {
    const extra = { ...status({ etaSeconds: Infinity, peersOnline: Number.NaN }), secret: "not for logs" };
    expect(statusRecord(extra)).toEqual({
      phase: "training",
      step: 12,
      globalSamples: 628,
      targetBatchSize: 1024,
      etaSeconds: null,
      localSamplesPerSecond: 850.5,
      samplesContributed: 5000,
      peersOnline: null,
      loss: 0.42,
      network: null,
      swarmNote: null,
      pauseReasons: [],
    });
  });

  it("writes a status at once when what keeps the peer from the swarm changes, and says it", () => {
    const destination = new FakeDestination();
    const clock = new FakeClock();
    const reporter = createJsonReporter({ destination, now: clock.now, statusIntervalMs: 10_000 });
    reporter.status(status());
    clock.time += 1_000;
    const note = "refused by the swarm: the token this node joined with was revoked — create a new token";
    reporter.status(status({ swarmNote: note }));
    clock.time += 1_000;
    reporter.status(status({ swarmNote: note }));
    reporter.status(status());
    expect(destination.records().map((record) => record["swarmNote"])).toEqual([null, note, null]);
  });

  it("carries the peer's mode and its members by path, and nothing else of it", () => {
    const network = { mode: "client" as const, direct: 1, relayed: 2, upgraded: 1 };
    const extra = { ...network, secret: "not for logs" };
    expect(statusRecord({ ...status(), network: extra }).network).toEqual(network);
  });

  it("writes nothing after close, from log(), status() or any logger", () => {
    const destination = new FakeDestination();
    const reporter = createJsonReporter({ destination, now: new FakeClock().now });
    const child = reporter.logger.child({ component: "dht" });
    reporter.log("info", "before");
    reporter.close();
    reporter.log("error", "after");
    reporter.status(status());
    reporter.logger.error("after");
    child.error("after");
    reporter.close();
    expect(destination.records().map((record) => record.msg)).toEqual(["before"]);
  });
});

/** A process stream stand-in with no descriptor, so JSON goes through `write`. */
class FakeStream extends FakeDestination {
  readonly isTTY: boolean;
  readonly columns = 100;

  constructor(isTTY: boolean) {
    super();
    this.isTTY = isTTY;
  }
}

describe("createReporter", () => {
  it("shows the live display on stderr when stderr is a terminal", () => {
    const stdout = new FakeStream(true);
    const stderr = new FakeStream(true);
    const reporter = createReporter({ stdout, stderr });
    reporter.status(status());
    reporter.logger.info("an info record hidden by the display's warn default");
    expect(stdout.writes).toEqual([]);
    expect(stderr.writes).toHaveLength(1);
    expect(stderr.writes[0]?.startsWith("\r\x1b[2Kstep 12 ")).toBe(true);
  });

  it("writes JSON to stdout when stderr is not a terminal or --json is given", () => {
    for (const [stderrIsTty, json] of [
      [false, undefined],
      [true, true],
    ] as const) {
      const stdout = new FakeStream(false);
      const stderr = new FakeStream(stderrIsTty);
      createReporter({ stdout, stderr, json }).log("info", "hello");
      expect(stderr.writes).toEqual([]);
      expect(stdout.records()).toEqual([expect.objectContaining({ msg: "hello" })]);
    }
  });

  it("writes JSON straight to stdout's descriptor, synchronously, when it has one", () => {
    const directory = mkdtempSync(join(tmpdir(), "reporter-"));
    try {
      const fd = openSync(join(directory, "out.log"), "w");
      const stdout = {
        fd,
        write: (): boolean => {
          throw new Error("the stream's own write is asynchronous on a pipe and must not be used");
        },
      };
      createReporter({ stdout, stderr: new FakeStream(false) }).log("info", "to the descriptor");
      // Read before closing: a synchronous destination has written already.
      const text = readFileSync(join(directory, "out.log"), "utf8");
      closeSync(fd);
      expect(JSON.parse(text)).toMatchObject({ msg: "to the descriptor" });
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it("applies the log level to both reporters", () => {
    const stdout = new FakeStream(false);
    createReporter({ stdout, stderr: new FakeStream(false), logLevel: "debug" }).logger.debug("kept");
    expect(stdout.records()).toEqual([expect.objectContaining({ msg: "kept" })]);

    const stderr = new FakeStream(true);
    createReporter({ stdout: new FakeStream(true), stderr, logLevel: "error" }).logger.warn("dropped");
    expect(stderr.writes).toEqual([]);
  });
});

describe("parseLogLevel", () => {
  it("accepts the four levels in any case", () => {
    expect(parseLogLevel("debug")).toBe("debug");
    expect(parseLogLevel("INFO")).toBe("info");
    expect(parseLogLevel(" warn ")).toBe("warn");
    expect(parseLogLevel("error")).toBe("error");
  });

  it("refuses anything else with a RangeError naming the choices", () => {
    for (const text of ["verbose", "", "trace", "silent", "fatal"]) {
      expect(() => parseLogLevel(text)).toThrow(RangeError);
    }
    expect(() => parseLogLevel("verbose")).toThrow(
      'unknown log level "verbose": use one of debug, info, warn, error',
    );
  });
});
