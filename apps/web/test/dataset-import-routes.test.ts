import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import * as tus from "tus-js-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DatasetImportView, DatasetList, DatasetManifest } from "../src/api/schemas/datasets.ts";
import {
  INTERRUPTED_MESSAGE,
  STALE_AFTER_MS,
  waitForDatasetImports,
} from "../src/server/datasets/dataset-imports.ts";
import { uploadsDir } from "../src/server/uploads/upload-server.ts";
import { Scrape } from "./support/prometheus.ts";
import { solidImage, writeZip } from "./support/image-archive.ts";
import { createUser, type FixtureUser } from "./support/peer-fixtures.ts";
import { startPlatformServer, type PlatformServer } from "./support/platform-server.ts";
import { sessionCookie } from "./support/test-app.ts";

/**
 * Uploads and imports over real HTTP: tus-js-client (its Node build) uploads to the route handler
 * served on 127.0.0.1, resumes an interrupted upload, and is refused without a session, on someone
 * else's upload and past the size limit; an import converts a CSV upload into a dataset the existing
 * routes list and serve, on SQLite and PostgreSQL.
 */

const MAX_UPLOAD_BYTES = 512 * 1024;

interface Person extends FixtureUser {
  readonly cookie: string;
}

interface ErrorJson {
  error: { code: string; message: string };
}

describe.each(testDatabaseProviders())("dataset uploads and imports (%s)", (provider) => {
  let platform: PlatformServer;
  let alice: Person;
  let bob: Person;

  beforeAll(async () => {
    platform = await startPlatformServer({
      provider,
      env: { BARNRAISE_MAX_UPLOAD_BYTES: String(MAX_UPLOAD_BYTES) },
    });
    const person = async (): Promise<Person> => {
      const user = await createUser(platform.app);
      return { ...user, cookie: await sessionCookie(user) };
    };
    alice = await person();
    bob = await person();
  });
  afterAll(async () => {
    await waitForDatasetImports();
    await platform.close();
  });

  const url = (path: string) => new URL(path, platform.url).href;
  const endpoint = () => url("/api/v1/uploads");

  /** Uploads `file` with tus-js-client as `who`; resolves with the upload's URL. */
  function upload(
    file: Buffer,
    who: Person | undefined,
    options: Partial<tus.UploadOptions> = {},
  ): Promise<string> {
    return new Promise((resolve, reject) => {
      const task: tus.Upload = new tus.Upload(file, {
        endpoint: endpoint(),
        metadata: { filename: "iris.csv", filetype: "text/csv" },
        headers: who === undefined ? {} : { cookie: who.cookie },
        retryDelays: null,
        onSuccess: () => {
          resolve(task.url ?? "");
        },
        onError: reject,
        ...options,
      });
      task.start();
    });
  }

  const tusHeaders = (who: Person | undefined, extra: Record<string, string> = {}) => ({
    "tus-resumable": "1.0.0",
    ...(who === undefined ? {} : { cookie: who.cookie }),
    ...extra,
  });

  const uploadIdOf = (uploadUrl: string) => new URL(uploadUrl).pathname.split("/").at(-1) ?? "";

  function postImport(who: Person | undefined, body: unknown): Promise<Response> {
    return fetch(url("/api/v1/datasets/imports"), {
      method: "POST",
      headers: { "content-type": "application/json", ...(who === undefined ? {} : { cookie: who.cookie }) },
      body: JSON.stringify(body),
    });
  }

  async function readImport(who: Person | undefined, id: string): Promise<Response> {
    return fetch(url(`/api/v1/datasets/imports/${id}`), {
      headers: who === undefined ? {} : { cookie: who.cookie },
    });
  }

  /** Polls the import until it is ready or failed. */
  async function settled(id: string): Promise<DatasetImportView> {
    for (;;) {
      const response = await readImport(alice, id);
      expect(response.status).toBe(200);
      const view = (await response.json()) as DatasetImportView;
      if (view.status === "ready" || view.status === "failed") return view;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  const CSV = Buffer.from(
    [
      "x,y,species",
      ...Array.from({ length: 25 }, (_, i) => `${i},${i / 4},${["a", "b", "c"][i % 3]}`),
      "",
    ].join("\n"),
  );

  describe("uploads (tus)", () => {
    it("stores an upload of a signed-in user, with the owner in its metadata", async () => {
      const uploadUrl = await upload(CSV, alice);
      expect(new URL(uploadUrl).pathname).toMatch(/^\/api\/v1\/uploads\/[0-9a-f]{32}$/);
      const id = uploadIdOf(uploadUrl);
      const stored = await readFile(join(uploadsDir(platform.app.dataDir), id));
      expect(stored.equals(CSV)).toBe(true);
      const info = JSON.parse(
        await readFile(join(uploadsDir(platform.app.dataDir), `${id}.json`), "utf8"),
      ) as {
        metadata: Record<string, string>;
      };
      expect(info.metadata).toEqual({ filename: "iris.csv", filetype: "text/csv", owner: alice.id });
      // Counted in the platform's /metrics, read back by the reference parser.
      const scraped = await Scrape.parse(await platform.app.ctx.metrics.registry.metrics());
      expect(scraped.value("barnraise_uploads_total", { kind: "dataset" })).toBe(1);
      expect(scraped.value("barnraise_upload_bytes_total", { kind: "dataset" })).toBe(CSV.length);

      const head = await fetch(uploadUrl, { method: "HEAD", headers: tusHeaders(alice) });
      expect(head.status).toBe(200);
      expect(head.headers.get("upload-offset")).toBe(String(CSV.length));
      expect(head.headers.get("upload-length")).toBe(String(CSV.length));
    });

    it("resumes an interrupted upload from the bytes the platform has", async () => {
      const file = Buffer.alloc(200 * 1024, 7);
      for (let i = 0; i < file.length; i += 1) file[i] = (i * 31) % 251;
      const stored = new Map<string, tus.PreviousUpload>();
      const urlStorage: tus.UrlStorage = {
        findAllUploads: () => Promise.resolve([...stored.values()]),
        findUploadsByFingerprint: (fingerprint) =>
          Promise.resolve(
            [...stored.entries()].filter(([key]) => key.startsWith(fingerprint)).map(([, v]) => v),
          ),
        removeUpload: (key) => {
          stored.delete(key);
          return Promise.resolve();
        },
        addUpload: (fingerprint, previous) => {
          const key = `${fingerprint}::${stored.size}`;
          stored.set(key, { ...previous, urlStorageKey: key });
          return Promise.resolve(key);
        },
      };
      const fingerprint = () => Promise.resolve("resume-test-file");
      const chunkSize = 64 * 1024;

      // The first attempt stops after two chunks, as a closed tab would.
      const first = await new Promise<string>((resolve, reject) => {
        const task: tus.Upload = new tus.Upload(file, {
          endpoint: endpoint(),
          headers: { cookie: alice.cookie },
          chunkSize,
          urlStorage,
          fingerprint,
          retryDelays: null,
          onChunkComplete: (_size, accepted) => {
            if (accepted >= 2 * chunkSize)
              void task.abort().then(() => {
                resolve(task.url ?? "");
              });
          },
          onSuccess: () => {
            reject(new Error("the upload should have been interrupted"));
          },
          onError: reject,
        });
        task.start();
      });
      const head = await fetch(first, { method: "HEAD", headers: tusHeaders(alice) });
      expect(head.headers.get("upload-offset")).toBe(String(2 * chunkSize));

      // The second finds it by fingerprint and sends only the rest.
      const offsets: string[] = [];
      const second = await new Promise<string>((resolve, reject) => {
        const task: tus.Upload = new tus.Upload(file, {
          endpoint: endpoint(),
          headers: { cookie: alice.cookie },
          chunkSize,
          urlStorage,
          fingerprint,
          retryDelays: null,
          onBeforeRequest: (req) => {
            if (req.getMethod() === "PATCH") offsets.push(req.getHeader("Upload-Offset") ?? "");
          },
          onSuccess: () => {
            resolve(task.url ?? "");
          },
          onError: reject,
        });
        void task.findPreviousUploads().then((previous) => {
          expect(previous).toHaveLength(1);
          task.resumeFromPreviousUpload(previous[0] as tus.PreviousUpload);
          task.start();
        });
      });
      expect(second).toBe(first);
      expect(offsets).toEqual([String(2 * chunkSize), String(3 * chunkSize)]);
      const bytes = await readFile(join(uploadsDir(platform.app.dataDir), uploadIdOf(second)));
      expect(bytes.equals(file)).toBe(true);
    });

    it("refuses an upload without a session", async () => {
      const before = await readdir(uploadsDir(platform.app.dataDir));
      const error = await upload(CSV, undefined).then(
        () => undefined,
        (caught: unknown) => caught as tus.DetailedError,
      );
      expect(error?.originalResponse?.getStatus()).toBe(401);
      expect(error?.originalResponse?.getBody()).toBe("sign in to upload files\n");
      expect(await readdir(uploadsDir(platform.app.dataDir))).toEqual(before);
    });

    it("keeps an upload to its owner", async () => {
      const file = Buffer.from("a,b\n1,2\n");
      // Alice declares 16 bytes and sends 8: the upload is open.
      const created = await fetch(endpoint(), {
        method: "POST",
        headers: tusHeaders(alice, { "upload-length": "16" }),
      });
      expect(created.status).toBe(201);
      const uploadUrl = url(created.headers.get("location") ?? "");
      const patch = (who: Person | undefined, offset: number) =>
        fetch(uploadUrl, {
          method: "PATCH",
          headers: tusHeaders(who, {
            "upload-offset": String(offset),
            "content-type": "application/offset+octet-stream",
          }),
          body: file,
        });

      for (const response of [
        await fetch(uploadUrl, { method: "HEAD", headers: tusHeaders(bob) }),
        await patch(bob, 0),
        await fetch(uploadUrl, { method: "DELETE", headers: tusHeaders(bob) }),
      ]) {
        expect(response.status).toBe(403);
        if (response.body !== null)
          expect(await response.text()).toBe("this upload belongs to another user\n");
      }
      expect((await patch(undefined, 0)).status).toBe(401);
      expect((await patch(alice, 0)).status).toBe(204);

      // Bob cannot import it either, nor can Alice import it unfinished.
      const body = { name: "not-bobs", uploadId: uploadIdOf(uploadUrl), format: "csv", labelKind: "class" };
      const stolen = await postImport(bob, body);
      expect(stolen.status).toBe(403);
      expect(((await stolen.json()) as ErrorJson).error).toEqual({
        code: "FORBIDDEN",
        message: "this upload belongs to another user",
      });
      const unfinished = await postImport(alice, body);
      expect(unfinished.status).toBe(409);
      expect(((await unfinished.json()) as ErrorJson).error.message).toBe(
        "the upload is not complete: 8 of 16 bytes received; finish it first",
      );
    });

    it("refuses a file over BARNRAISE_MAX_UPLOAD_BYTES", async () => {
      const error = await upload(Buffer.alloc(MAX_UPLOAD_BYTES + 1), alice).then(
        () => undefined,
        (caught: unknown) => caught as tus.DetailedError,
      );
      expect(error?.originalResponse?.getStatus()).toBe(413);
      expect(error?.originalResponse?.getBody()).toBe(
        `the file is larger than this platform accepts: at most ${MAX_UPLOAD_BYTES} bytes (BARNRAISE_MAX_UPLOAD_BYTES)\n`,
      );
      // A deferred length cannot get past the limit by sending more.
      const created = await fetch(endpoint(), {
        method: "POST",
        headers: tusHeaders(alice, { "upload-defer-length": "1" }),
      });
      expect(created.status).toBe(201);
      const over = await fetch(url(created.headers.get("location") ?? ""), {
        method: "PATCH",
        headers: tusHeaders(alice, {
          "upload-offset": "0",
          "content-type": "application/offset+octet-stream",
        }),
        body: Buffer.alloc(MAX_UPLOAD_BYTES + 1),
      });
      expect(over.status).toBe(413);
    });

    it("refuses a write from another site", async () => {
      const response = await fetch(endpoint(), {
        method: "POST",
        headers: tusHeaders(alice, { "upload-length": "4", origin: "https://evil.example" }),
      });
      expect(response.status).toBe(403);
      expect(await response.text()).toBe("requests from https://evil.example are not accepted\n");
    });

    it("announces the protocol and the limit to anyone", async () => {
      const response = await fetch(endpoint(), { method: "OPTIONS" });
      expect(response.status).toBe(204);
      expect(response.headers.get("tus-version")).toContain("1.0.0");
      expect(response.headers.get("tus-max-size")).toBe(String(MAX_UPLOAD_BYTES));
      expect(response.headers.get("access-control-allow-origin")).toBeNull();
    });
  });

  describe("imports", () => {
    it("converts an upload into a dataset the platform lists and serves", async () => {
      const uploadId = uploadIdOf(await upload(CSV, alice));
      const response = await postImport(alice, {
        name: "iris-upload",
        uploadId,
        format: "csv",
        labelKind: "class",
      });
      expect(response.status).toBe(202);
      const created = (await response.json()) as DatasetImportView;
      expect(response.headers.get("location")).toBe(`/api/v1/datasets/imports/${created.id}`);
      expect(created).toMatchObject({ name: "iris-upload", bytesTotal: CSV.length, error: null });
      expect(["queued", "converting", "ready"]).toContain(created.status);

      const done = await settled(created.id);
      expect(done).toEqual({
        id: created.id,
        name: "iris-upload",
        status: "ready",
        bytesDone: CSV.length,
        bytesTotal: CSV.length,
        records: 25,
        error: null,
      });

      const list = (await (await fetch(url("/api/v1/datasets"))).json()) as DatasetList;
      const listed = list.datasets.find((dataset) => dataset.name === "iris-upload");
      expect(listed).toMatchObject({
        format: "tabular-f32",
        createdFrom: { upload: "iris.csv", bytes: CSV.length },
        splits: { train: { records: 23 }, test: { records: 2 } },
      });
      const manifest = (await (await fetch(url("/api/v1/datasets/iris-upload"))).json()) as DatasetManifest;
      expect(manifest.format).toBe("tabular-f32");
      const shard = manifest.shards[0];
      if (shard === undefined) throw new Error("no shard");
      const served = new Uint8Array(
        await (await fetch(url(`/api/v1/datasets/iris-upload/shards/${shard.file}`))).arrayBuffer(),
      );
      const first = new DataView(served.buffer, served.byteOffset, 12);
      expect([first.getFloat32(0, true), first.getFloat32(4, true), first.getFloat32(8, true)]).toEqual([
        0, 0, 0,
      ]);
      expect(served.byteLength).toBe(shard.bytes);

      // The upload's bytes are gone once imported; the row keeps the file name and label column.
      expect(await readdir(uploadsDir(platform.app.dataDir))).not.toContain(uploadId);
      const row = await platform.app.db.datasetImport.findUniqueOrThrow({ where: { id: created.id } });
      expect(row).toMatchObject({
        fileName: "iris.csv",
        labelColumn: "species",
        labelKind: "class",
        kind: "csv",
      });

      // The name is taken now.
      const again = await postImport(alice, {
        name: "iris-upload",
        uploadId,
        format: "csv",
        labelKind: "class",
      });
      expect(again.status).toBe(409);
      expect(((await again.json()) as ErrorJson).error.message).toBe(
        'a dataset named "iris-upload" already exists',
      );
    });

    it("converts a zip archive of class folders and a plain text over the same routes", async () => {
      const files: [string, Buffer][] = [];
      for (let i = 0; i < 12; i++)
        files.push([`shapes/circle/${i}.png`, await solidImage(12, 12, [250, 0, 0])]);
      for (let i = 0; i < 12; i++)
        files.push([`shapes/square/${i}.jpg`, await solidImage(9, 15, [0, 0, 250], "jpeg")]);
      const zipPath = join(platform.app.dataDir, "shapes.zip");
      await writeZip(zipPath, files);
      const zip = await readFile(zipPath);
      const imagesId = uploadIdOf(
        await upload(zip, alice, { metadata: { filename: "shapes.zip", filetype: "application/zip" } }),
      );
      const images = await postImport(alice, {
        name: "shapes",
        uploadId: imagesId,
        format: "images",
        width: 6,
        height: 6,
        channels: 1,
      });
      expect(images.status).toBe(202);
      expect(await settled(((await images.json()) as DatasetImportView).id)).toMatchObject({
        status: "ready",
        records: 24,
        bytesDone: zip.byteLength,
        bytesTotal: zip.byteLength,
      });
      const imageManifest = (await (await fetch(url("/api/v1/datasets/shapes"))).json()) as DatasetManifest;
      expect(imageManifest).toMatchObject({
        format: "image-u8",
        createdFrom: { upload: "shapes.zip", bytes: zip.byteLength },
        splits: { train: { records: 22 }, test: { records: 2 } },
        record: { bytes: 38, label: { classes: ["circle", "square"] } },
      });

      const text = Buffer.from("The first line.\nA second line, with more words.\n".repeat(30));
      const textId = uploadIdOf(
        await upload(text, alice, { metadata: { filename: "lines.txt", filetype: "text/plain" } }),
      );
      const lines = await postImport(alice, {
        name: "lines",
        uploadId: textId,
        format: "text",
        vocabSize: 64,
      });
      expect(lines.status).toBe(202);
      const created = (await lines.json()) as DatasetImportView;
      expect(created.bytesTotal).toBe(2 * text.byteLength);
      expect(await settled(created.id)).toMatchObject({ status: "ready", records: 60 });
      const textManifest = (await (await fetch(url("/api/v1/datasets/lines"))).json()) as DatasetManifest;
      expect(textManifest).toMatchObject({
        format: "tokens-u16le",
        splits: { train: { records: 57 }, test: { records: 3 } },
        vocabulary: { size: 5 + 10 },
      });
      const vocab = await fetch(url("/api/v1/datasets/lines/shards/vocab.txt"));
      expect(vocab.status).toBe(200);
      expect((await vocab.text()).split("\n").slice(5, 7)).toEqual([".", "line"]);
    });

    it("reports an image archive without class folders, and a bad image by its path", async () => {
      const flatPath = join(platform.app.dataDir, "flat.zip");
      await writeZip(flatPath, [
        ["1.png", await solidImage(4, 4, [1, 2, 3])],
        ["2.png", await solidImage(4, 4, [1, 2, 3])],
      ]);
      const flatId = uploadIdOf(await upload(await readFile(flatPath), alice));
      const flat = await postImport(alice, {
        name: "flat",
        uploadId: flatId,
        format: "images",
        width: 8,
        height: 8,
        channels: 3,
      });
      expect(await settled(((await flat.json()) as DatasetImportView).id)).toMatchObject({
        status: "failed",
        error:
          "the archive has no class folders: put each class's images in a folder named after the class " +
          "(cats/001.jpg, dogs/001.jpg, …)",
      });
      const brokenPath = join(platform.app.dataDir, "broken.zip");
      await writeZip(brokenPath, [
        ["a/1.png", await solidImage(4, 4, [1, 2, 3])],
        ["b/oops.png", Buffer.from("not a png")],
      ]);
      const brokenId = uploadIdOf(await upload(await readFile(brokenPath), alice));
      const broken = await postImport(alice, {
        name: "broken",
        uploadId: brokenId,
        format: "images",
        width: 8,
        height: 8,
        channels: 3,
      });
      const done = await settled(((await broken.json()) as DatasetImportView).id);
      expect(done.error).toMatch(/^b\/oops\.png: not an image that can be decoded/);
      // Sizes the manifest cannot hold are refused before anything runs.
      expect(
        (
          await postImport(alice, {
            name: "huge",
            uploadId: brokenId,
            format: "images",
            width: 4096,
            height: 8,
            channels: 3,
          })
        ).status,
      ).toBe(400);
      expect(
        (
          await postImport(alice, {
            name: "bad-c",
            uploadId: brokenId,
            format: "images",
            width: 8,
            height: 8,
            channels: 4,
          })
        ).status,
      ).toBe(400);
      expect(
        (await postImport(alice, { name: "t", uploadId: brokenId, format: "text", vocabSize: 3 })).status,
      ).toBe(400);
    });

    it("reports a bad file with its line and column", async () => {
      const bad = Buffer.from("x,y,label\n1,2,0\n3,four,1\n");
      const uploadId = uploadIdOf(await upload(bad, alice));
      const response = await postImport(alice, {
        name: "bad-file",
        uploadId,
        format: "csv",
        labelColumn: "label",
        labelKind: "value",
      });
      expect(response.status).toBe(202);
      const done = await settled(((await response.json()) as DatasetImportView).id);
      expect(done).toMatchObject({ status: "failed", error: 'line 3, column "y": "four" is not a number' });
      const list = (await (await fetch(url("/api/v1/datasets"))).json()) as DatasetList;
      expect(list.datasets.map((dataset) => dataset.name)).not.toContain("bad-file");
      // A failed import keeps the upload, to try again with other options.
      expect(await readdir(uploadsDir(platform.app.dataDir))).toContain(uploadId);
    });

    it("refuses names that are taken, bodies that do not validate, and visitors", async () => {
      const uploadId = uploadIdOf(await upload(CSV, alice));
      const codeOf = async (response: Response) => [
        response.status,
        ((await response.json()) as ErrorJson).error,
      ];
      expect(
        await codeOf(await postImport(alice, { name: "mnist", uploadId, format: "csv", labelKind: "class" })),
      ).toEqual([
        409,
        {
          code: "CONFLICT",
          message: '"mnist" is the name of a dataset the platform prepares itself; choose another name',
        },
      ]);
      expect(
        (await postImport(alice, { name: "imports", uploadId, format: "csv", labelKind: "class" })).status,
      ).toBe(409);
      expect(
        (await postImport(alice, { name: "Bad Name", uploadId, format: "csv", labelKind: "class" })).status,
      ).toBe(400);
      expect(
        (await postImport(alice, { name: "ok", uploadId, format: "xlsx", labelKind: "class" })).status,
      ).toBe(400);
      expect(
        (await postImport(alice, { name: "ok", uploadId, format: "csv", labelKind: "both" })).status,
      ).toBe(400);
      expect(
        await codeOf(
          await postImport(alice, {
            name: "ok",
            uploadId: "0".repeat(32),
            format: "csv",
            labelKind: "class",
          }),
        ),
      ).toEqual([404, { code: "NOT_FOUND", message: `there is no upload "${"0".repeat(32)}"` }]);
      expect(
        (await postImport(undefined, { name: "ok", uploadId, format: "csv", labelKind: "class" })).status,
      ).toBe(401);

      // An import of that name under way elsewhere (another instance, beating) holds the name.
      await platform.app.db.datasetImport.create({
        data: {
          name: "busy",
          ownerId: bob.id,
          uploadId: "f".repeat(32),
          fileName: "b.csv",
          kind: "csv",
          labelKind: "class",
          status: "converting",
          bytesTotal: 10n,
          worker: "another-instance",
          heartbeatAt: new Date(),
        },
      });
      expect(
        await codeOf(await postImport(alice, { name: "busy", uploadId, format: "csv", labelKind: "class" })),
      ).toEqual([409, { code: "CONFLICT", message: 'dataset "busy" is already being imported' }]);
    });

    it("shows an import only to the user who started it", async () => {
      const row = await platform.app.db.datasetImport.create({
        data: {
          name: "private",
          ownerId: alice.id,
          uploadId: "e".repeat(32),
          fileName: "p.csv",
          kind: "csv",
          labelKind: "class",
          status: "ready",
          bytesTotal: 10n,
          bytesDone: 10n,
          records: 3n,
        },
      });
      expect((await readImport(bob, row.id)).status).toBe(403);
      expect((await readImport(undefined, row.id)).status).toBe(401);
      expect((await readImport(alice, "nope")).status).toBe(404);
      expect(await (await readImport(alice, row.id)).json()).toEqual({
        id: row.id,
        name: "private",
        status: "ready",
        bytesDone: 10,
        bytesTotal: 10,
        records: 3,
        error: null,
      });
    });

    it("marks a conversion failed once its worker has stopped beating", async () => {
      const orphan = (worker: string, heartbeatAt: Date) =>
        platform.app.db.datasetImport.create({
          data: {
            name: "orphan",
            ownerId: alice.id,
            uploadId: "d".repeat(32),
            fileName: "o.csv",
            kind: "csv",
            labelKind: "class",
            status: "converting",
            bytesTotal: 100n,
            bytesDone: 40n,
            worker,
            heartbeatAt,
          },
        });
      // Another instance that beat a moment ago is alive: its import stays converting.
      const alive = await orphan("another-instance", new Date());
      expect(await (await readImport(alice, alive.id)).json()).toMatchObject({
        status: "converting",
        bytesDone: 40,
      });
      // One whose last beat is older than STALE_AFTER_MS (say, this platform before a restart) is gone.
      const gone = await orphan("before-restart", new Date(Date.now() - STALE_AFTER_MS - 1000));
      expect(await (await readImport(alice, gone.id)).json()).toMatchObject({
        status: "failed",
        error: INTERRUPTED_MESSAGE,
        bytesDone: 40,
      });
      await platform.app.db.datasetImport.deleteMany({ where: { name: "orphan" } });
    });
  });
});
