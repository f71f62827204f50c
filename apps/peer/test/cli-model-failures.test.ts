import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { PeerExitCode, reportFailure } from "../src/cli.ts";
import { ModelError, ModelErrorCode, tampered } from "@barnraise/models";
import { createReporter } from "../src/ui/create-reporter.ts";

/**
 * How the CLI ends when the experiment's uploaded model cannot be used: other bytes than the signed
 * ones exit like any answer that failed verification (13), a model it cannot download or train
 * exits 16; each with one error record that carries the ModelError's code and says what to do.
 */

class Captured extends Writable {
  readonly isTTY = false;
  text = "";

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.text += chunk.toString("utf8");
    callback();
  }
}

function fail(error: unknown): { code: number; records: { level: number; msg: string; code?: string }[] } {
  const stdout = new Captured();
  const reporter = createReporter({ stdout, stderr: new Captured(), json: true });
  const signals = { stopSignal: new AbortController().signal, abortSignal: new AbortController().signal };
  const code = reportFailure(reporter, error, signals);
  reporter.close();
  const records = stdout.text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as { level: number; msg: string; code?: string });
  return { code, records };
}

describe("the CLI's answer to an unusable uploaded model", () => {
  it("exits 13 for a model whose bytes differ from the signed SHA-256", () => {
    const { code, records } = fail(tampered("ab".repeat(32), "model.json has SHA-256 00…"));
    expect(code).toBe(PeerExitCode.tampered);
    expect(records.map((record) => record.code)).toEqual(["MODEL_TAMPERED"]);
    expect(records[0]?.msg).toMatch(/differs from the signed SHA-256.*refuses to train it/);
  });

  it.each([ModelErrorCode.MODEL_UNAVAILABLE, ModelErrorCode.MODEL_INVALID])(
    "exits 16 for %s",
    (modelCode) => {
      const { code, records } = fail(new ModelError(modelCode, "the platform has no model abababababab"));
      expect(code).toBe(PeerExitCode.model);
      expect(records).toEqual([
        expect.objectContaining({ code: modelCode, msg: "the platform has no model abababababab" }),
      ]);
    },
  );

  it("still treats a model error after a stop as the interruption", () => {
    const stop = new AbortController();
    stop.abort();
    const reporter = createReporter({ stdout: new Captured(), stderr: new Captured(), json: true });
    const code = reportFailure(reporter, new ModelError(ModelErrorCode.MODEL_UNAVAILABLE, "x"), {
      stopSignal: stop.signal,
      abortSignal: new AbortController().signal,
    });
    reporter.close();
    expect(code).toBe(PeerExitCode.interrupted);
  });
});
