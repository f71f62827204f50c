import { appendFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { errorLines, LogTail, parseRecord, statusLine, stepLine } from "../log-records.ts";

describe("log records", () => {
  it("reads a peer's step and status records", () => {
    const step = parseRecord(
      '{"level":30,"time":5,"step":26,"groupSize":4,"samples":3864,"localSamples":1760,"shared":true,"stateDigest":"4ba79acde2a2bb26","msg":"step 26"}',
    );
    expect(step && stepLine(step)).toEqual({
      time: 5,
      step: 26,
      groupSize: 4,
      samples: 3864,
      localSamples: 1760,
      shared: true,
      stateDigest: "4ba79acde2a2bb26",
    });
    const status = parseRecord(
      '{"time":6,"phase":"training","step":3,"swarmNote":"refused by the swarm: x","msg":"status"}',
    );
    expect(status && statusLine(status)).toEqual({
      time: 6,
      phase: "training",
      step: 3,
      swarmNote: "refused by the swarm: x",
    });
    expect(parseRecord("Warning: Couldn't load Vulkan")).toBeNull();
    const other = parseRecord('{"time":1,"msg":"step 26 is late"}');
    expect(other && stepLine(other)).toBeNull();
  });

  it("finds the platform's error records and Next.js's text errors", () => {
    const lines = [
      '{"level":30,"time":100,"msg":"fine"}',
      '{"level":50,"time":200,"msg":"broken"}',
      " ⨯ Error: something failed",
      "- Local: http://localhost:3900",
      '{"level":60,"time":300,"msg":"fatal"}',
    ].map((text) => ({ text, readAt: 999 }));
    expect(errorLines(lines, "platform.0.log").map((line) => [line.time, line.level])).toEqual([
      [200, 50],
      [200, 50],
      [300, 60],
    ]);
  });

  it("tails a growing file, holding a partial line until it ends", () => {
    const file = join(mkdtempSync(join(tmpdir(), "soak-tail-")), "x.log");
    const tail = new LogTail(file);
    expect(tail.poll(1)).toEqual([]);
    writeFileSync(file, "one\ntw");
    expect(tail.poll(2).map((line) => line.text)).toEqual(["one"]);
    appendFileSync(file, "o ⨯\nthree");
    expect(tail.poll(3).map((line) => line.text)).toEqual(["two ⨯"]);
    expect(tail.poll(4, true).map((line) => line.text)).toEqual(["three"]);
    expect(tail.lines).toHaveLength(3);
  });
});
