import { join } from "node:path";
import type { ServerEnv } from "../env.ts";
import { LocalObjectStore } from "./local-object-store.ts";
import type { ObjectStore } from "./object-store.ts";
import { S3ObjectStore } from "./s3-object-store.ts";

/**
 * The store the environment names: an S3-compatible bucket with `BARNRAISE_STORAGE_URL`, else the
 * data directory. Either way dataset conversions build their files in `<data dir>/.staging`.
 */
export function openObjectStore(env: Pick<ServerEnv, "dataDir" | "storage">): ObjectStore {
  const storage = env.storage;
  if (storage.kind === "local") return new LocalObjectStore(env.dataDir);
  return new S3ObjectStore(storage, join(env.dataDir, ".staging"));
}
