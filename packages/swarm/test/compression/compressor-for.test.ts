import { describe, expect, it } from "vitest";
import { CompressionMethod } from "@barnraise/protocol";
import { SwarmErrorCode, isSwarmError } from "../../src/errors.ts";
import {
  CODEC_NAMES,
  DEFAULT_ADAPTIVE_THRESHOLD,
  compressorFor,
  decompress,
  type CompressionMethodName,
} from "../../src/compression/index.ts";

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (error) {
    return isSwarmError(error) ? error.code : `not a SwarmError: ${String(error)}`;
  }
  return undefined;
}

describe("compressorFor", () => {
  it("covers every method of the experiment config", () => {
    expect(CODEC_NAMES).toEqual(["none", "fp16", "uniform8", "quantile8", "blockwise8", "topk", "sparse"]);
    // "sparse" only carries a topk round's results: it is a codec, not a method.
    const methods = [...CODEC_NAMES.filter((name) => name !== "sparse"), "adaptive"];
    expect(methods.sort()).toEqual(Object.values(CompressionMethod).sort());
    for (const name of CODEC_NAMES) expect(compressorFor(name, 10).name).toBe(name);
  });

  it("adaptive picks blockwise8 from 65,536 elements on, fp16 below", () => {
    expect(DEFAULT_ADAPTIVE_THRESHOLD).toBe(65_536);
    expect(compressorFor("adaptive", 65_535).name).toBe("fp16");
    expect(compressorFor("adaptive", 65_536).name).toBe("blockwise8");
    expect(compressorFor("adaptive", 0).name).toBe("fp16");
  });

  it("adaptive honours the configured threshold", () => {
    expect(compressorFor("adaptive", 9, 10).name).toBe("fp16");
    expect(compressorFor("adaptive", 10, 10).name).toBe("blockwise8");
    expect(compressorFor("adaptive", 0, 1).name).toBe("fp16");
    expect(compressorFor("adaptive", 1, 1).name).toBe("blockwise8");
  });

  it("adaptive output decodes without knowing which codec was picked", () => {
    for (const length of [100, 70_000]) {
      const values = Float32Array.from({ length }, (_, i) => Math.sin(i));
      const compressor = compressorFor("adaptive", length, 50_000);
      const decoded = decompress(compressor.compress(values), length);
      expect(decoded).toHaveLength(length);
      const tolerance = compressor.name === "fp16" ? 2 ** -11 : 1 / 254;
      expect(decoded.every((x, i) => Math.abs(x - (values[i] ?? 0)) <= tolerance)).toBe(true);
    }
  });

  it("refuses an unknown method, a bad length or a bad threshold", () => {
    expect(codeOf(() => compressorFor("zip" as CompressionMethodName, 1))).toBe(
      SwarmErrorCode.MALFORMED_MESSAGE,
    );
    expect(codeOf(() => compressorFor("adaptive", -1))).toBe(SwarmErrorCode.LENGTH_MISMATCH);
    expect(codeOf(() => compressorFor("adaptive", 1.5))).toBe(SwarmErrorCode.LENGTH_MISMATCH);
    expect(codeOf(() => compressorFor("adaptive", 10, 0))).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
    expect(codeOf(() => compressorFor("adaptive", 10, NaN))).toBe(SwarmErrorCode.MALFORMED_MESSAGE);
  });
});
