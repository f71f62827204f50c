import { spawn } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { findCheckpoint, stageCheckpoint } from "../src/server/storage/checkpoint-store.ts";
import { LocalObjectStore } from "../src/server/storage/local-object-store.ts";
import {
  ObjectNotFoundError,
  readObjectBytes,
  StorageUnavailableError,
  type ObjectStore,
} from "../src/server/storage/object-store.ts";
import { S3ObjectStore, type S3StorageConfig } from "../src/server/storage/s3-object-store.ts";
import { startS3Server, type TestS3Server } from "./support/s3-server.ts";

/**
 * One suite, run against both stores: the local directory and an S3-compatible server (s3rver on
 * 127.0.0.1). Each test gets a fresh store: a new directory, or a new key prefix in the bucket.
 */

interface StoreFixture {
  readonly store: ObjectStore;
  /** The same objects, opened again (as by the next process). */
  reopen(): ObjectStore;
}

interface StoreKind {
  readonly name: string;
  setUp(): Promise<void>;
  open(): Promise<StoreFixture>;
  tearDown(): Promise<void>;
}

const temporary: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "barnraise-objects-"));
  temporary.push(dir);
  return dir;
}
afterEach(async () => {
  await Promise.all(temporary.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

const local: StoreKind = {
  name: "local directory",
  async setUp() {},
  async open() {
    const root = await tempDir();
    return { store: new LocalObjectStore(root), reopen: () => new LocalObjectStore(root) };
  },
  async tearDown() {},
};

let server: TestS3Server | undefined;
let prefixes = 0;
function s3Config(prefix: string, overrides: Partial<S3StorageConfig> = {}): S3StorageConfig {
  if (server === undefined) throw new Error("the S3 server is not running");
  return {
    bucket: server.bucket,
    prefix,
    endpoint: server.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
    ...overrides,
  };
}
const s3: StoreKind = {
  name: "S3 (s3rver)",
  async setUp() {
    server = await startS3Server();
  },
  async open() {
    prefixes += 1;
    const config = s3Config(`suite-${prefixes}/`);
    const scratch = await tempDir();
    return { store: new S3ObjectStore(config, scratch), reopen: () => new S3ObjectStore(config, scratch) };
  },
  async tearDown() {
    await server?.close();
    server = undefined;
  },
};

function bytes(length: number, seed = 7): Uint8Array {
  return new Uint8Array(length).map((_, i) => (i * seed + (i >> 8)) % 251);
}

async function keys(store: ObjectStore, prefix: string): Promise<string[]> {
  return (await store.list(prefix)).map((object) => object.key);
}

/** More than one 8 MiB part: a multipart upload on S3. */
const MULTIPART_BYTES = 9 * 1024 * 1024 + 123;

describe.each([local, s3])("object store: $name", (kind) => {
  let store: ObjectStore;
  let fixture: StoreFixture;

  beforeAll(async () => {
    await kind.setUp();
  });
  afterAll(async () => {
    await kind.tearDown();
  });
  beforeEach(async () => {
    fixture = await kind.open();
    store = fixture.store;
  });

  it("writes an object in chunks and reads it back whole", async () => {
    const staged = await store.stage("checkpoints/run/a.ckpt");
    await staged.write(new Uint8Array([1, 2, 3]));
    await staged.write(new Uint8Array([4, 5]));
    await staged.commit();
    await staged.discard();
    expect(await store.head("checkpoints/run/a.ckpt")).toEqual({ key: "checkpoints/run/a.ckpt", size: 5 });
    expect(await readObjectBytes(store, "checkpoints/run/a.ckpt")).toEqual(new Uint8Array([1, 2, 3, 4, 5]));

    await store.put("models/m/model.json", new TextEncoder().encode('{"a":1}'));
    expect(new TextDecoder().decode(await readObjectBytes(store, "models/m/model.json"))).toBe('{"a":1}');
    await store.put("empty/file.bin", new Uint8Array());
    expect(await store.head("empty/file.bin")).toEqual({ key: "empty/file.bin", size: 0 });
    expect(await readObjectBytes(store, "empty/file.bin")).toEqual(new Uint8Array());
  });

  it("puts a local file, which it consumes", async () => {
    const path = join(store.scratchDir, `${process.pid}-file.bin`);
    const content = bytes(70_000);
    await writeFile(path, content);
    await store.putFile("datasets/d/train-00000.bin", path);
    expect(await readObjectBytes(store, "datasets/d/train-00000.bin")).toEqual(content);
    expect(await readdir(store.scratchDir)).not.toContain(`${process.pid}-file.bin`);
  });

  it("reads byte ranges, across the parts of a multipart upload too", async () => {
    const content = bytes(MULTIPART_BYTES);
    const staged = await store.stage("big/object.bin");
    for (let offset = 0; offset < content.length; offset += 1 << 20) {
      await staged.write(content.subarray(offset, offset + (1 << 20)));
    }
    await staged.commit();
    expect((await store.head("big/object.bin"))?.size).toBe(MULTIPART_BYTES);

    const boundary = 8 * 1024 * 1024;
    for (const [start, end] of [
      [0, 0],
      [3, 7],
      [boundary - 10, boundary + 10],
      [MULTIPART_BYTES - 5, MULTIPART_BYTES - 1],
    ] as const) {
      expect(await readObjectBytes(store, "big/object.bin", { start, end }), `${start}-${end}`).toEqual(
        content.subarray(start, end + 1),
      );
    }
    expect(await readObjectBytes(store, "big/object.bin")).toEqual(content);
  });

  it("keeps an upload invisible until it is committed, also to a store opened again", async () => {
    const staged = await store.stage("checkpoints/run/b.ckpt");
    await staged.write(bytes(MULTIPART_BYTES));
    for (const view of [store, fixture.reopen()]) {
      expect(await view.head("checkpoints/run/b.ckpt")).toBeNull();
      expect(await keys(view, "checkpoints/")).toEqual([]);
      await expect(view.read("checkpoints/run/b.ckpt")).rejects.toThrow(ObjectNotFoundError);
    }
    await staged.commit();
    expect(await keys(store, "checkpoints/")).toEqual(["checkpoints/run/b.ckpt"]);
  });

  it("leaves nothing of a discarded upload, small or multipart", async () => {
    for (const size of [1000, MULTIPART_BYTES]) {
      const staged = await store.stage("checkpoints/run/c.ckpt");
      await staged.write(bytes(size));
      await staged.discard();
      await staged.discard();
      expect(await store.head("checkpoints/run/c.ckpt")).toBeNull();
      expect(await keys(store, "checkpoints/")).toEqual([]);
    }
  });

  it("lists nothing of an upload whose process is gone before its commit", async () => {
    const abandoned = await store.stage("checkpoints/run/d.ckpt");
    await abandoned.write(bytes(MULTIPART_BYTES));
    // The next process opens the store: the upload was never committed.
    const next = fixture.reopen();
    expect(await keys(next, "checkpoints/")).toEqual([]);
    expect(await next.head("checkpoints/run/d.ckpt")).toBeNull();
    await abandoned.discard();
  });

  it("replaces an object as a whole, and removes it", async () => {
    await store.put("models/x/model.json", bytes(100, 3));
    const staged = await store.stage("models/x/model.json");
    await staged.write(bytes(40, 5));
    // Until the commit, readers get the old object.
    expect(await readObjectBytes(store, "models/x/model.json")).toEqual(bytes(100, 3));
    await staged.commit();
    expect(await readObjectBytes(store, "models/x/model.json")).toEqual(bytes(40, 5));

    await store.remove("models/x/model.json");
    expect(await store.head("models/x/model.json")).toBeNull();
    await expect(store.read("models/x/model.json")).rejects.toThrow(ObjectNotFoundError);
    await store.remove("models/x/model.json");
    expect(await keys(store, "models/")).toEqual([]);
  });

  it("lists by prefix, in key order, only whole segments", async () => {
    for (const key of ["a/c/3", "a/b/2", "a/b/1", "ab/4", "a.tmp/5"]) await store.put(key, bytes(4));
    expect(await keys(store, "a/")).toEqual(["a/b/1", "a/b/2", "a/c/3"]);
    expect(await keys(store, "a/b/")).toEqual(["a/b/1", "a/b/2"]);
    expect(await keys(store, "z/")).toEqual([]);
    expect(await store.list("a/b/")).toEqual([
      { key: "a/b/1", size: 4 },
      { key: "a/b/2", size: 4 },
    ]);
  });

  it("refuses keys and prefixes that could leave the store", async () => {
    const bad = [
      "../escape",
      "a/../../escape",
      "/etc/passwd",
      ".staging/x",
      "a//b",
      "a/",
      "",
      "a/./b",
      "a\\b",
    ];
    for (const key of bad) {
      await expect(store.stage(key), key).rejects.toThrow(RangeError);
      await expect(store.put(key, bytes(1)), key).rejects.toThrow(RangeError);
      await expect(store.head(key), key).rejects.toThrow(RangeError);
      await expect(store.read(key), key).rejects.toThrow(RangeError);
      await expect(store.remove(key), key).rejects.toThrow(RangeError);
    }
    for (const prefix of ["../", "a", "/", "a/../"]) {
      await expect(store.list(prefix), prefix).rejects.toThrow(RangeError);
    }
    // Checkpoint storage keys are checked before they reach the store.
    for (const key of ["../secret.ckpt", "secret.ckpt", "demo/../../secret.ckpt", "demo/a.txt"]) {
      expect(await findCheckpoint(store, key), key).toBeNull();
      expect(() => stageCheckpoint(store, key), key).toThrow(/not a checkpoint storage key/);
    }
  });

  it("is usable", async () => {
    await expect(store.check()).resolves.toBeUndefined();
  });
});

describe("local object store", () => {
  /** The pid of a process that has exited (and been reaped). */
  async function deadPid(): Promise<number> {
    const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
    const pid = child.pid;
    await new Promise((resolve) => child.once("exit", resolve));
    if (pid === undefined) throw new Error("no pid");
    return pid;
  }

  it("keeps the files where earlier versions of the platform kept them, and stages in .staging", async () => {
    const root = await tempDir();
    const store = new LocalObjectStore(root);
    const staged = await store.stage("checkpoints/run/a.ckpt");
    await staged.write(bytes(10));
    expect(await readdir(join(root, ".staging"))).toHaveLength(1);
    await staged.commit();
    expect(await readdir(join(root, "checkpoints", "run"))).toEqual(["a.ckpt"]);
    expect(await readdir(join(root, ".staging"))).toEqual([]);
    // Removing the last object of a directory removes the directory.
    await store.remove("checkpoints/run/a.ckpt");
    expect(await readdir(root)).toEqual([".staging"]);
  });

  it("sweeps staging entries of dead processes and of a former process with this pid, not those of live ones", async () => {
    const root = await tempDir();
    const store = new LocalObjectStore(root);
    const staged = await store.stage("checkpoints/run/a.ckpt");
    await staged.write(bytes(10));
    const [own] = await readdir(join(root, ".staging"));
    const staging = join(root, ".staging");
    const dead = `${await deadPid()}-abandoned.part`;
    const former = `${process.pid}-former-incarnation.part`;
    const live = `${process.ppid}-in-progress.part`;
    for (const name of [dead, former, live, "junk"]) await writeFile(join(staging, name), "partial");

    new LocalObjectStore(root);
    expect((await readdir(staging)).sort()).toEqual([live, own].sort());
    await staged.commit();
    expect(await readdir(staging)).toEqual([live]);
  });
});

describe("S3 object store, unusable", () => {
  let running: TestS3Server;
  beforeAll(async () => {
    running = await startS3Server();
    server = running;
  });
  afterAll(async () => {
    await running.close();
    server = undefined;
  });

  it("says that the bucket does not exist", async () => {
    const store = new S3ObjectStore(s3Config("", { bucket: "no-such-bucket" }), await tempDir());
    await expect(store.check()).rejects.toThrow(StorageUnavailableError);
    await expect(store.check()).rejects.toThrow(
      /object storage s3:\/\/no-such-bucket\/ \(endpoint http:\/\/127\.0\.0\.1:\d+\) is not usable: the bucket does not exist/,
    );
  });

  it("says that the endpoint cannot be reached", async () => {
    // A port that was just free: nothing listens there.
    const closed = await startS3Server("closed-bucket");
    const endpoint = closed.endpoint;
    await closed.close();
    const store = new S3ObjectStore(s3Config("", { endpoint }), await tempDir());
    await expect(store.check()).rejects.toThrow(
      new RegExp(
        `object storage s3://barnraise-test/ \\(endpoint ${endpoint.replace(/\./g, "\\.")}\\) is not usable: .*ECONNREFUSED`,
      ),
    );
  });
});
