import { describe, expect, it } from "vitest";
import type { PeerStatus } from "@barnraise/volunteer";
import { createTtyReporter, formatDuration, formatStatusLine } from "../../src/ui/tty-reporter.ts";

/** A terminal stand-in: records every write and replays them as the screen a person would see. */
class FakeTerminal {
  readonly writes: string[] = [];
  columns: number;

  constructor(columns = 120) {
    this.columns = columns;
  }

  write(text: string): boolean {
    this.writes.push(text);
    return true;
  }

  /** The visible lines: `\r` goes to column 0, `ESC[2K` erases the line, `\n` starts a new one. */
  screen(): string[] {
    const lines = [""];
    let column = 0;
    const output = this.writes.join("");
    for (let i = 0; i < output.length;) {
      if (output.startsWith("\x1b[2K", i)) {
        lines[lines.length - 1] = "";
        i += 4;
        continue;
      }
      const character = output.charAt(i++);
      if (character === "\r") column = 0;
      else if (character === "\n") {
        lines.push("");
        column = 0;
      } else {
        const line = (lines.at(-1) ?? "").padEnd(column);
        lines[lines.length - 1] = line.slice(0, column) + character + line.slice(column + 1);
        column++;
      }
    }
    return lines;
  }

  /** The bottom line, where the status is drawn. */
  statusLine(): string {
    return this.screen().at(-1) ?? "";
  }
}

class FakeClock {
  time = new Date(2025, 2, 14, 13, 5, 9).getTime();
  readonly now = (): number => this.time;
}

function status(overrides: Partial<PeerStatus> = {}): PeerStatus {
  return {
    phase: "training",
    step: 12,
    globalSamples: 628,
    targetBatchSize: 1024,
    etaSeconds: 4.2,
    localSamplesPerSecond: 850.4,
    samplesContributed: 5000,
    peersOnline: 3,
    loss: 0.42131,
    ...overrides,
  };
}

const FULL_LINE = "step 12 ▕██████░░░░▏ 61% 628/1024 · eta 4s · 850 samples/s · 3 peers · loss 0.4213";

describe("createTtyReporter status line", () => {
  it("draws the first status at once, in place", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.status(status());
    expect(terminal.writes).toEqual([`\r\x1b[2K${FULL_LINE}`]);
    expect(terminal.screen()).toEqual([FULL_LINE]);
  });

  it("redraws at most once per interval, then shows the newest status", () => {
    const terminal = new FakeTerminal();
    const clock = new FakeClock();
    const reporter = createTtyReporter({ stream: terminal, now: clock.now, minIntervalMs: 200 });
    reporter.status(status());
    clock.time += 100;
    reporter.status(status({ globalSamples: 700 }));
    clock.time += 50;
    reporter.status(status({ globalSamples: 800 }));
    expect(terminal.writes).toHaveLength(1);
    expect(terminal.statusLine()).toContain("628/1024");
    clock.time += 50;
    reporter.status(status({ globalSamples: 900 }));
    expect(terminal.writes).toHaveLength(2);
    expect(terminal.statusLine()).toContain("900/1024");
    expect(terminal.screen()).toHaveLength(1);
  });

  it("draws a phase change at once and names the phase", () => {
    const terminal = new FakeTerminal();
    const clock = new FakeClock();
    const reporter = createTtyReporter({ stream: terminal, now: clock.now, minIntervalMs: 200 });
    reporter.status(status());
    clock.time += 10;
    reporter.status(status({ phase: "averaging", globalSamples: 1024 }));
    expect(terminal.writes).toHaveLength(2);
    expect(terminal.statusLine()).toBe(
      "averaging… · step 12 ▕██████████▏ 100% 1024/1024 · 3 peers · loss 0.4213",
    );
    clock.time += 10;
    reporter.status(status({ phase: "loading-state", step: 0, peersOnline: 1, loss: undefined }));
    expect(terminal.statusLine()).toBe("loading state… · step 0 · 1 peer");
  });

  it("says why the volunteer's rules hold training, and the organizer's pause otherwise", () => {
    expect(formatStatusLine(status({ phase: "paused", pauseReasons: ["battery", "in-use"] }), 200)).toMatch(
      /^paused: on battery, machine in use · step 12/,
    );
    expect(formatStatusLine(status({ phase: "paused" }), 200)).toMatch(/^paused by the organizer · step 12/);
  });

  it("omits an unknown loss and shows an unknown ETA as ?", () => {
    const line = formatStatusLine(status({ loss: undefined, etaSeconds: Infinity }), 200);
    expect(line).toBe("step 12 ▕██████░░░░▏ 61% 628/1024 · eta ? · 850 samples/s · 3 peers");
    expect(formatStatusLine(status({ etaSeconds: Number.NaN }), 200)).toContain("eta ?");
  });

  it("shows the peer's mode and how it reaches its members", () => {
    const line = formatStatusLine(
      status({ network: { mode: "client", direct: 1, relayed: 2, upgraded: 1 } }),
      200,
    );
    expect(line).toBe(FULL_LINE.replace(" · loss", " · client: 1 direct, 2 relayed, 1 upgraded · loss"));
    expect(
      formatStatusLine(status({ network: { mode: "node", direct: 0, relayed: 0, upgraded: 0 } }), 200),
    ).toContain(" · node: no members connected · ");
    // On a narrow terminal the paths go before the step's numbers do.
    expect(
      formatStatusLine(status({ network: { mode: "node", direct: 3, relayed: 0, upgraded: 0 } }), 60),
    ).not.toContain("node:");
  });

  it("fits a narrow terminal by dropping the least important parts first", () => {
    const terminal = new FakeTerminal(60);
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.status(status());
    const line = terminal.statusLine();
    expect(line.length).toBeLessThanOrEqual(59);
    expect(line).toBe("step 12 61% · eta 4s · 850 samples/s · 3 peers");
  });

  it("never writes a status line wider than the terminal, however narrow", () => {
    for (const columns of [120, 80, 60, 40, 30, 20, 12, 5, 1]) {
      for (const phase of ["training", "averaging", "joining", "loading-state"] as const) {
        const terminal = new FakeTerminal(columns);
        createTtyReporter({ stream: terminal, now: new FakeClock().now }).status(status({ phase }));
        expect(terminal.statusLine().length, `${phase} at ${columns}`).toBeLessThanOrEqual(columns - 1);
      }
    }
    expect(formatStatusLine(status({ phase: "loading-state" }), 10)).toBe("loading s…");
    expect(formatStatusLine(status(), 21)).toBe("step 12 61% · 3 peers");
    expect(formatStatusLine(status(), 20)).toBe("step 12 61%");
  });

  it("follows a resized terminal at the next redraw", () => {
    const terminal = new FakeTerminal(120);
    const clock = new FakeClock();
    const reporter = createTtyReporter({ stream: terminal, now: clock.now });
    reporter.status(status());
    terminal.columns = 40;
    clock.time += 1000;
    reporter.status(status());
    expect(terminal.statusLine().length).toBeLessThanOrEqual(39);
  });
});

describe("createTtyReporter log lines", () => {
  it("prints a log line above the status line and draws the status again", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.status(status());
    reporter.log("warn", "access pass refresh failed", { err: new Error("timed out"), attempt: 2 });
    expect(terminal.screen()).toEqual([
      '13:05:09 warn  access pass refresh failed err="timed out" attempt=2',
      FULL_LINE,
    ]);
    reporter.log("info", "joined", { peer: "12D3KooW", ok: true, nothing: undefined });
    expect(terminal.screen()).toEqual([
      '13:05:09 warn  access pass refresh failed err="timed out" attempt=2',
      "13:05:09 info  joined peer=12D3KooW ok=true",
      FULL_LINE,
    ]);
  });

  it("redraws the newest status with a log line, even one the throttle held back", () => {
    const terminal = new FakeTerminal();
    const clock = new FakeClock();
    const reporter = createTtyReporter({ stream: terminal, now: clock.now, minIntervalMs: 200 });
    reporter.status(status());
    clock.time += 50;
    reporter.status(status({ globalSamples: 700 }));
    reporter.log("info", "hello");
    expect(terminal.screen()).toEqual(["13:05:09 info  hello", expect.stringContaining("700/1024")]);
  });

  it("prints log lines before any status without drawing an empty status", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.log("error", "config signature invalid");
    expect(terminal.writes).toEqual(["13:05:09 error config signature invalid\n"]);
  });

  it("escapes control characters so remote text cannot drive the terminal", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.log("warn", "bad\x1b[2Jpeer", { reason: "x\u009by" });
    expect(terminal.writes.join("")).not.toContain("\x1b[2J");
    expect(terminal.screen()[0]).toBe("13:05:09 warn  bad\\u001b[2Jpeer reason=x\\u009by");
  });
});

describe("createTtyReporter swarm logger", () => {
  it("prints records at or above the level as human lines, with err as its message", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now, level: "info" });
    reporter.status(status());
    reporter.logger.debug({ peer: "a" }, "member list refresh failed");
    reporter.logger.info({ peer: "b", reason: "no pass" }, "hello failed; disconnecting");
    reporter.logger.child({ component: "averager" }).warn({ err: new Error("boom") }, "round failed");
    expect(terminal.screen()).toEqual([
      '13:05:09 info  hello failed; disconnecting peer=b reason="no pass"',
      "13:05:09 warn  round failed component=averager err=boom",
      FULL_LINE,
    ]);
  });

  it("drops info and debug records by default and does not even serialize debug ones", () => {
    const terminal = new FakeTerminal();
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    let serialized = 0;
    const costly = {
      toJSON: () => {
        serialized++;
        return "x";
      },
    };
    reporter.logger.debug({ costly }, "noise");
    reporter.logger.info({ costly }, "more noise");
    expect(serialized).toBe(0);
    expect(terminal.writes).toEqual([]);
    reporter.logger.error({ costly }, "real trouble");
    expect(serialized).toBe(1);
    expect(terminal.screen()[0]).toBe("13:05:09 error real trouble costly=x");
  });
});

describe("createTtyReporter close", () => {
  it("clears the status line and writes nothing afterwards", () => {
    const terminal = new FakeTerminal();
    const clock = new FakeClock();
    const reporter = createTtyReporter({ stream: terminal, now: clock.now });
    const child = reporter.logger.child({ component: "dht" });
    reporter.status(status());
    reporter.close();
    expect(terminal.writes.at(-1)).toBe("\r\x1b[2K");
    expect(terminal.screen()).toEqual([""]);
    const written = terminal.writes.length;
    clock.time += 10_000;
    reporter.status(status({ phase: "stopping" }));
    reporter.log("error", "late");
    reporter.logger.error("late record");
    child.error("late child record");
    reporter.close();
    expect(terminal.writes).toHaveLength(written);
  });
});

describe("formatDuration", () => {
  it("uses the two largest units", () => {
    expect(formatDuration(0)).toBe("0s");
    expect(formatDuration(4.2)).toBe("4s");
    expect(formatDuration(59.6)).toBe("1m00s");
    expect(formatDuration(185)).toBe("3m05s");
    expect(formatDuration(7800)).toBe("2h10m");
    expect(formatDuration(3599.7)).toBe("1h00m");
  });

  it("shows ? when the time is unknown", () => {
    expect(formatDuration(Infinity)).toBe("?");
    expect(formatDuration(Number.NaN)).toBe("?");
    expect(formatDuration(-1)).toBe("?");
  });
});

describe("createTtyReporter swarm note", () => {
  const REFUSED =
    "refused by the swarm: the token this node joined with was revoked — create a new token on the experiment's page and restart the node with it";
  const CUT_OFF =
    "the swarm trains (3 peers alive) but this peer reaches none of its aux peers — check that this machine can reach the aux peer's address";

  it("names the cut-off phase and shows why in place of the peer count", () => {
    const terminal = new FakeTerminal(400);
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.status(status());
    reporter.status(status({ phase: "cut-off", swarmNote: CUT_OFF, peersOnline: 1 }));
    expect(terminal.statusLine()).toBe(
      `cut off from the swarm, not training · step 12 · ${CUT_OFF} · loss 0.4213`,
    );
    expect(terminal.statusLine()).not.toContain("1 peer");
  });

  it("shows a refusal in place of the peer count while the peer still trains", () => {
    const line = formatStatusLine(status({ swarmNote: REFUSED, peersOnline: 1 }), 400);
    expect(line).toBe(FULL_LINE.replace("3 peers", REFUSED));
    // Without a note, the peer count is back.
    expect(formatStatusLine(status(), 400)).toBe(FULL_LINE);
  });

  it("keeps the note when the terminal narrows, after every other segment is gone", () => {
    const note = "refused by the swarm: pass revoked — restart the node";
    const training = status({
      swarmNote: note,
      network: { mode: "client", direct: 0, relayed: 1, upgraded: 0 },
    });
    const full = formatStatusLine(training, 400);
    expect(full).toBe(
      `step 12 ▕██████░░░░▏ 61% 628/1024 · eta 4s · 850 samples/s · ${note} · client: 1 relayed · loss 0.4213`,
    );
    // Narrower and narrower: the step's numbers, the loss, the rate and the step itself go; the note stays.
    for (let width = full.length; width >= note.length; width--) {
      expect(formatStatusLine(training, width), `at ${width}`).toContain(note);
    }
    expect(formatStatusLine(training, `step 12 61% · ${note}`.length)).toBe(`step 12 61% · ${note}`);
    expect(formatStatusLine(training, `step 12 · ${note}`.length)).toBe(`step 12 · ${note}`);
    expect(formatStatusLine(training, note.length)).toBe(note);
    // Narrower than the note itself: what fits of it.
    expect(formatStatusLine(training, 20)).toBe(`${note.slice(0, 19)}…`);
    // Cut off, the loss and the step go before the note.
    const cutOff = status({ phase: "cut-off", swarmNote: note });
    const label = "cut off from the swarm, not training";
    expect(formatStatusLine(cutOff, `${label} · ${note}`.length)).toBe(`${label} · ${note}`);
  });

  it("never writes a status line with a note wider than the terminal", () => {
    for (const columns of [200, 120, 80, 40, 10, 1]) {
      for (const phase of ["training", "cut-off", "paused"] as const) {
        const terminal = new FakeTerminal(columns);
        createTtyReporter({ stream: terminal, now: new FakeClock().now }).status(
          status({ phase, swarmNote: REFUSED }),
        );
        expect(terminal.statusLine().length, `${phase} at ${columns}`).toBeLessThanOrEqual(columns - 1);
      }
    }
  });

  it("escapes control characters in the note: a refusal's reason is another peer's text", () => {
    const terminal = new FakeTerminal(400);
    const reporter = createTtyReporter({ stream: terminal, now: new FakeClock().now });
    reporter.status(
      status({ swarmNote: "refused by the swarm: \x1b[2J\x1b[Hgotcha\u009b31m — restart the node" }),
    );
    const written = terminal.writes.join("");
    expect(written).not.toContain("\x1b[2J");
    expect(written).not.toContain("\x1b[H");
    expect(written).not.toContain("\u009b");
    expect(terminal.statusLine()).toContain("gotcha");
  });
});
