import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GET as shardRoute } from "../app/api/v1/datasets/[name]/shards/[file]/route.ts";
import { GET as datasetsRoute } from "../app/api/v1/datasets/route.ts";
import { GET as downloadRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/route.ts";
import { GET as healthRoute, type HealthResponse } from "../app/api/v1/health/route.ts";
import { GET as modelFileRoute } from "../app/api/v1/models/[sha256]/[file]/route.ts";
import { POST as modelUploadRoute } from "../app/api/v1/models/route.ts";
import type { DatasetList } from "../src/api/schemas/datasets.ts";
import type { CheckpointView } from "../src/api/schemas/public.ts";
import { importCsvDataset } from "../src/server/datasets/csv-import.ts";
import { main as prepareCommand } from "../src/server/datasets/prepare-datasets-command.ts";
import { prepareDatasets } from "../src/server/datasets/prepare-datasets.ts";
import { EnvError, loadServerEnv } from "../src/server/env.ts";
import { readStoredModel } from "../src/server/models/model-store.ts";
import { openObjectStore } from "../src/server/storage/open-object-store.ts";
import { createTestUser, uniqueName } from "./support/actors.ts";
import { upload } from "./support/checkpoint-upload.ts";
import { multipartOf, savedLayersModel } from "./support/layers-fixture.ts";
import { setUpAux } from "./support/peer-fixtures.ts";
import { startS3Server, type TestS3Server } from "./support/s3-server.ts";
import {
  callRoute,
  createTestApp,
  TEST_AUTH_SECRET,
  TEST_SEALING_SECRET,
  type TestApp,
} from "./support/test-app.ts";

/**
 * The platform with `BARNRAISE_STORAGE_URL` pointing at an S3-compatible server (s3rver on
 * 127.0.0.1): checkpoints, uploaded models and datasets go through the real routes into the bucket
 * and come back from it, and nothing of them lands in the data directory.
 */

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

describe("the platform on S3-compatible object storage", () => {
  let s3: TestS3Server;
  let app: TestApp;

  beforeAll(async () => {
    s3 = await startS3Server();
    app = await createTestApp("sqlite", { env: s3.env("platform/") });
  });
  afterAll(async () => {
    await app.dispose();
    await s3.close();
  });

  it("uses the bucket that BARNRAISE_STORAGE_URL names, and its health check says so", async () => {
    expect(app.ctx.storage.location).toBe(`s3://${s3.bucket}/platform/`);
    const response = await healthRoute();
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: "ok", storage: { status: "ok" } });
  });

  it("stores an uploaded checkpoint in the bucket and serves it whole and by range", async () => {
    const setup = await setUpAux(app);
    const file = new Uint8Array(randomBytes(300_000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 10,
      body: file,
    });
    const created = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(created)).toBe(201);
    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id: created.id } });
    expect(await app.ctx.storage.list(`checkpoints/${setup.experimentId}/`)).toEqual([
      { key: `checkpoints/${row.storageKey}`, size: file.length },
    ]);

    const download = (headers: Record<string, string> = {}) =>
      callRoute(downloadRoute, created.downloadUrl, {
        params: { id: setup.experimentId, checkpointId: created.id },
        headers,
      });
    const whole = await download();
    expect(whole.status).toBe(200);
    expect(sha256(new Uint8Array(await whole.arrayBuffer()))).toBe(sha256(file));

    const ranged = await download({ range: "bytes=1000-70999" });
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get("content-range")).toBe(`bytes 1000-70999/${file.length}`);
    expect(new Uint8Array(await ranged.arrayBuffer())).toEqual(file.subarray(1000, 71000));

    const first = await download({ range: "bytes=0-0" });
    expect(first.status).toBe(206);
    expect(new Uint8Array(await first.arrayBuffer())).toEqual(file.subarray(0, 1));
  });

  it("stores an uploaded model in the bucket and serves its files", async () => {
    const organizer = await createTestUser(app, uniqueName("model-organizer"));
    const saved = await savedLayersModel({ inputs: 4, hidden: 8, classes: 3 });
    const { body, contentType } = await multipartOf(saved.files);
    const response = await callRoute(modelUploadRoute, "/api/v1/models", {
      method: "POST",
      body,
      headers: { "content-type": contentType },
      cookie: organizer.cookie,
    });
    const created = (await response.json()) as { model: { sha256: string } };
    expect(response.status, JSON.stringify(created)).toBe(201);
    const { sha256: id } = created.model;

    const stored = await readStoredModel(app.ctx.storage, id);
    const keys = (await app.ctx.storage.list(`models/${id}/`)).map((object) => object.key);
    expect(keys).toEqual([`models/${id}/model.json`, `models/${id}/${stored.weightsFile}`].sort());

    const weights = await callRoute(modelFileRoute, `/api/v1/models/${id}/${stored.weightsFile}`, {
      params: { sha256: id, file: stored.weightsFile },
    });
    expect(weights.status).toBe(200);
    const original = saved.files.find((entry) => entry.name === "weights.bin")?.bytes;
    expect(new Uint8Array(await weights.arrayBuffer())).toEqual(original);
    const modelJson = await callRoute(modelFileRoute, `/api/v1/models/${id}/model.json`, {
      params: { sha256: id, file: "model.json" },
    });
    expect(sha256(new Uint8Array(await modelJson.arrayBuffer()))).toBe(id);
  });

  it("prepares and imports datasets into the bucket, lists them and serves their shards by range", async () => {
    const [prepared] = await prepareDatasets({
      storage: app.ctx.storage,
      datasets: ["mnist"],
      limit: 100,
      recordsPerShard: 40,
    });
    const source = join(await mkdtemp(join(tmpdir(), "barnraise-csv-")), "iris.csv");
    await writeFile(source, "a,b,label\n1,2,x\n3,4,y\n5,6,x\n7,8,y\n9,10,x\n");
    await importCsvDataset({
      storage: app.ctx.storage,
      source,
      name: "pairs",
      fileName: "pairs.csv",
      labelKind: "class",
    });
    await rm(join(source, ".."), { recursive: true, force: true });

    const list = (await (await callRoute(datasetsRoute, "/api/v1/datasets")).json()) as DatasetList;
    expect(list.datasets.map((dataset) => dataset.name)).toEqual(["mnist", "pairs"]);

    const shard = prepared?.manifest.shards[1];
    if (shard === undefined) throw new Error("mnist has fewer than two shards");
    const path = `/api/v1/datasets/mnist/shards/${shard.file}`;
    const whole = await callRoute(shardRoute, path, { params: { name: "mnist", file: shard.file } });
    expect(whole.status).toBe(200);
    const bytes = new Uint8Array(await whole.arrayBuffer());
    expect(sha256(bytes)).toBe(shard.sha256);
    const ranged = await callRoute(shardRoute, path, {
      params: { name: "mnist", file: shard.file },
      headers: { range: "bytes=785-1569" },
    });
    expect(ranged.status).toBe(206);
    expect(new Uint8Array(await ranged.arrayBuffer())).toEqual(bytes.subarray(785, 1570));
  });

  it("writes through `npm run datasets:prepare` into the configured bucket", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "barnraise-prepare-"));
    try {
      const env = { ...s3.env("cli/"), BARNRAISE_DATA_DIR: dataDir };
      expect(await prepareCommand(["--dataset", "mnist", "--limit", "20"], env)).toBe(0);
      const store = openObjectStore(loadServerEnvFor(env));
      expect((await store.list("datasets/mnist/")).map((object) => object.key)).toContain(
        "datasets/mnist/manifest.json",
      );
      expect(await readdir(dataDir)).toEqual([".staging"]);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it("wrote nothing of them under the data directory", async () => {
    const entries = await readdir(app.dataDir);
    for (const area of ["checkpoints", "models", "datasets"]) expect(entries).not.toContain(area);
    // Only the conversions' scratch space, emptied again.
    expect(await readdir(join(app.dataDir, ".staging"))).toEqual([]);
  });
});

describe("a bucket the platform cannot use", () => {
  let s3: TestS3Server;
  beforeAll(async () => {
    s3 = await startS3Server();
  });
  afterAll(async () => {
    await s3.close();
  });

  it("fails the health check with 503, saying the storage is unavailable", async () => {
    const app = await createTestApp("sqlite", {
      env: { ...s3.env(), BARNRAISE_STORAGE_URL: "s3://no-such-bucket/x" },
    });
    try {
      const response = await healthRoute();
      expect(response.status).toBe(503);
      const body = (await response.json()) as HealthResponse;
      expect(body.status).toBe("unavailable");
      expect(body.storage).toMatchObject({ status: "unavailable" });
    } finally {
      await app.dispose();
    }
  });

  it("stops `npm run datasets:prepare` with the reason", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "barnraise-prepare-"));
    const errors: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = (text: string) => {
      errors.push(text);
      return true;
    };
    try {
      const env = { ...s3.env(), BARNRAISE_STORAGE_URL: "s3://no-such-bucket", BARNRAISE_DATA_DIR: dataDir };
      expect(await prepareCommand(["--dataset", "mnist", "--limit", "20"], env)).toBe(1);
    } finally {
      process.stderr.write = write;
      await rm(dataDir, { recursive: true, force: true });
    }
    expect(errors.join("")).toMatch(
      /datasets:prepare failed: object storage s3:\/\/no-such-bucket\/ .* is not usable: the bucket does not exist/,
    );
  });
});

/** The storage part of the environment, through the platform's own validation. */
function loadServerEnvFor(env: Record<string, string>) {
  return loadServerEnv({ AUTH_SECRET: TEST_AUTH_SECRET, BARNRAISE_SECRET: TEST_SEALING_SECRET, ...env });
}

describe("BARNRAISE_STORAGE_URL", () => {
  const parse = (url: string, extra: Record<string, string> = {}) =>
    loadServerEnvFor({ BARNRAISE_STORAGE_URL: url, ...extra }).storage;

  it("names a bucket and an optional prefix; without it the data directory is used", () => {
    expect(loadServerEnvFor({}).storage).toEqual({ kind: "local" });
    expect(parse("s3://my-bucket")).toMatchObject({ kind: "s3", bucket: "my-bucket", prefix: "" });
    expect(parse("s3://my.bucket/runs/barnraise/")).toMatchObject({ prefix: "runs/barnraise/" });
    expect(
      parse("s3://b-1/p", {
        AWS_ENDPOINT_URL: "http://fallback:1",
        AWS_ENDPOINT_URL_S3: "http://minio.local:9000",
        BARNRAISE_S3_FORCE_PATH_STYLE: "1",
        AWS_ACCESS_KEY_ID: "key",
        AWS_SECRET_ACCESS_KEY: "secret",
      }),
    ).toEqual({
      kind: "s3",
      bucket: "b-1",
      prefix: "p/",
      endpoint: "http://minio.local:9000",
      region: "us-east-1",
      forcePathStyle: true,
      credentials: { accessKeyId: "key", secretAccessKey: "secret" },
    });
    expect(parse("s3://b-1", { AWS_REGION: "eu-west-3" })).toMatchObject({
      region: "eu-west-3",
      forcePathStyle: false,
      endpoint: undefined,
      credentials: undefined,
    });
  });

  it("refuses a URL that is not an S3 location, saying what is wrong", () => {
    const cases: [string, RegExp][] = [
      [
        "/var/lib/barnraise",
        /BARNRAISE_STORAGE_URL: must look like s3:\/\/bucket .*got "\/var\/lib\/barnraise"/,
      ],
      ["https://bucket/x", /the scheme must be s3: \(got https:\)/],
      ["s3://Bucket_Name/x", /"bucket_name" is not a bucket name|"Bucket_Name" is not a bucket name/],
      ["s3://ab", /"ab" is not a bucket name/],
      ["s3://key:secret@bucket", /credentials do not belong in the URL/],
      ["s3://bucket:9000/x", /takes no port, query or fragment/],
      ["s3://bucket/x?region=eu", /takes no port, query or fragment/],
      ["s3://bucket/.hidden", /the prefix segment ".hidden"/],
    ];
    for (const [url, message] of cases) {
      expect(() => parse(url), url).toThrow(EnvError);
      expect(() => parse(url), url).toThrow(message);
    }
    expect(() => parse("s3://bucket", { AWS_ACCESS_KEY_ID: "key" })).toThrow(
      /AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither/,
    );
    expect(() => parse("s3://bucket", { BARNRAISE_S3_FORCE_PATH_STYLE: "yes" })).toThrow(
      /BARNRAISE_S3_FORCE_PATH_STYLE/,
    );
    expect(() => parse("s3://bucket", { AWS_ENDPOINT_URL_S3: "not a url" })).toThrow(/AWS_ENDPOINT_URL_S3/);
  });

  it("leaves the AWS variables alone when the files stay in the data directory", () => {
    // Other software's settings, malformed for this platform, do not stop one that uses no S3.
    expect(
      loadServerEnvFor({ AWS_ENDPOINT_URL: "not a url", AWS_ACCESS_KEY_ID: "only-the-key" }).storage,
    ).toEqual({ kind: "local" });
  });
});
