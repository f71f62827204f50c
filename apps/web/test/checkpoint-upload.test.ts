import { randomBytes } from "node:crypto";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as downloadRoute } from "../app/api/v1/experiments/[id]/checkpoints/[checkpointId]/route.ts";
import { GET as listRoute, POST as uploadRoute } from "../app/api/v1/experiments/[id]/checkpoints/route.ts";
import type { CheckpointList, CheckpointView } from "../src/api/schemas/public.ts";
import { chunkedStream, sha256, storeContents, upload, uploadPath } from "./support/checkpoint-upload.ts";
import {
  createToken,
  createUser,
  errorCode,
  joinNode,
  setAllowlistStatus,
  setUpAux,
  signedAuthorization,
  type AuxSetup,
} from "./support/peer-fixtures.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

const LIMIT = 256 * 1024;

describe.each(testDatabaseProviders())("checkpoint upload and download (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;

  beforeEach(async () => {
    app = await createTestApp(provider, { env: { BARNRAISE_MAX_CHECKPOINT_BYTES: String(LIMIT) } });
    setup = await setUpAux(app);
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function expectNothingStored(): Promise<void> {
    expect(await app.db.checkpoint.count()).toBe(0);
    expect(await storeContents(app.dataDir)).toEqual({ visible: [], staging: [] });
  }

  function download(checkpointId: string, headers: Record<string, string> = {}): Promise<Response> {
    return callRoute(downloadRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints/${checkpointId}`, {
      params: { id: setup.experimentId, checkpointId },
      headers,
    });
  }

  it("stores a streamed upload, lists it, and serves the same bytes with ranges", async () => {
    const file = new Uint8Array(randomBytes(200_000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 120,
      loss: 0.31,
      body: chunkedStream(file, { chunkSize: 16_384 }),
      signedBytes: file,
      contentLength: null,
    });
    const created = (await response.json()) as CheckpointView;
    expect(response.status, JSON.stringify(created)).toBe(201);
    const digest = Buffer.from(sha256(file)).toString("hex");
    expect(created).toMatchObject({ step: 120, loss: 0.31, sizeBytes: file.length, sha256: digest });
    expect(created.downloadUrl).toBe(`/api/v1/experiments/${setup.experimentId}/checkpoints/${created.id}`);

    const row = await app.db.checkpoint.findUniqueOrThrow({ where: { id: created.id } });
    expect(row.uploadedBy).toBe(setup.aux.peerId);
    expect((await storeContents(app.dataDir)).staging).toEqual([]);

    const list = await callRoute(listRoute, `/api/v1/experiments/${setup.experimentId}/checkpoints`, {
      params: { id: setup.experimentId },
    });
    expect(((await list.json()) as CheckpointList).checkpoints).toEqual([created]);

    const whole = await download(created.id);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("content-type")).toBe("application/octet-stream");
    expect(whole.headers.get("content-length")).toBe(String(file.length));
    expect(whole.headers.get("etag")).toBe(`"${digest}"`);
    expect(whole.headers.get("content-disposition")).toContain(
      `filename="${setup.experimentId}-step-120.ckpt"`,
    );
    const downloaded = new Uint8Array(await whole.arrayBuffer());
    expect(Buffer.from(sha256(downloaded)).toString("hex")).toBe(digest);
    expect(Buffer.compare(downloaded, file)).toBe(0);

    const part = await download(created.id, { range: "bytes=1000-1999" });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe(`bytes 1000-1999/${file.length}`);
    expect(Buffer.compare(new Uint8Array(await part.arrayBuffer()), file.subarray(1000, 2000))).toBe(0);

    const tail = await download(created.id, { range: "bytes=-10" });
    expect(Buffer.compare(new Uint8Array(await tail.arrayBuffer()), file.subarray(-10))).toBe(0);

    const beyond = await download(created.id, { range: `bytes=${file.length}-` });
    expect(await errorCode(beyond)).toEqual({ status: 416, code: "RANGE_NOT_SATISFIABLE" });
    expect(beyond.headers.get("content-range")).toBe(`bytes */${file.length}`);
  });

  it("accepts a body sent with a matching Content-Length and no loss", async () => {
    const file = new Uint8Array(randomBytes(5000));
    const response = await upload({ node: setup.aux, experimentId: setup.experimentId, step: 3, body: file });
    expect(response.status).toBe(201);
    expect(await response.json()).toMatchObject({ step: 3, loss: null, sizeBytes: 5000 });
  });

  it("keeps one of two uploads of the same step sent at once, refuses the other (CONFLICT) and leaves no file of it", async () => {
    const first = new Uint8Array(randomBytes(50_000));
    const files = [first, new Uint8Array(randomBytes(50_000))];
    const responses = await Promise.all(
      files.map((file) =>
        upload({
          node: setup.aux,
          experimentId: setup.experimentId,
          step: 40,
          body: chunkedStream(file, { chunkSize: 4096 }),
          signedBytes: file,
          contentLength: null,
        }),
      ),
    );
    const statuses = responses.map((response) => response.status).sort();
    expect(statuses).toEqual([201, 409]);
    const refused = responses.filter((response) => response.status === 409);
    expect(await Promise.all(refused.map(errorCode))).toEqual([{ status: 409, code: "CONFLICT" }]);
    expect(await app.db.checkpoint.count()).toBe(1);
    expect((await storeContents(app.dataDir)).visible).toHaveLength(1);

    const again = await upload({ node: setup.aux, experimentId: setup.experimentId, step: 40, body: first });
    expect(await errorCode(again)).toEqual({ status: 409, code: "CONFLICT" });
  });

  it("refuses a corrupted upload (CHECKSUM_MISMATCH) and keeps nothing", async () => {
    const file = new Uint8Array(randomBytes(50_000));
    const corrupted = file.slice();
    corrupted[25_000] = (corrupted[25_000] ?? 0) ^ 0xff;
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      body: corrupted,
      signedBytes: file,
    });
    expect(await errorCode(response)).toEqual({ status: 400, code: "CHECKSUM_MISMATCH" });
    await expectNothingStored();
  });

  it("refuses a declared size over the limit before reading (PAYLOAD_TOO_LARGE)", async () => {
    const file = new Uint8Array(LIMIT + 1);
    const response = await upload({ node: setup.aux, experimentId: setup.experimentId, step: 1, body: file });
    expect(await errorCode(response)).toEqual({ status: 413, code: "PAYLOAD_TOO_LARGE" });
    await expectNothingStored();
  });

  it("refuses a Content-Length other than sizeBytes (SIZE_MISMATCH)", async () => {
    const file = new Uint8Array(randomBytes(4000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      body: file,
      sizeBytes: 3000,
      signedBytes: file,
    });
    expect(await errorCode(response)).toEqual({ status: 400, code: "SIZE_MISMATCH" });
    await expectNothingStored();
  });

  it("stops reading a body that runs past sizeBytes (SIZE_MISMATCH)", async () => {
    const file = new Uint8Array(randomBytes(100_000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      sizeBytes: 40_000,
      signedBytes: file.subarray(0, 40_000),
      body: chunkedStream(file, { chunkSize: 8192 }),
      contentLength: null,
    });
    expect(await errorCode(response)).toEqual({ status: 400, code: "SIZE_MISMATCH" });
    await expectNothingStored();
  });

  it("refuses a body that ends early (SIZE_MISMATCH)", async () => {
    const file = new Uint8Array(randomBytes(100_000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      sizeBytes: file.length,
      signedBytes: file,
      body: chunkedStream(file.subarray(0, 60_000)),
      contentLength: null,
    });
    expect(await errorCode(response)).toEqual({ status: 400, code: "SIZE_MISMATCH" });
    await expectNothingStored();
  });

  it("drops an upload whose connection breaks mid-stream", async () => {
    const file = new Uint8Array(randomBytes(100_000));
    const response = await upload({
      node: setup.aux,
      experimentId: setup.experimentId,
      step: 1,
      signedBytes: file,
      sizeBytes: file.length,
      body: chunkedStream(file, { chunkSize: 10_000, failAfter: 4 }),
      contentLength: null,
    });
    expect(await errorCode(response)).toEqual({ status: 400, code: "SIZE_MISMATCH" });
    await expectNothingStored();
  });

  it("signs the metadata: a step changed after signing is refused (REQUEST_WRONG_SCOPE)", async () => {
    const file = new Uint8Array(randomBytes(1000));
    const signedPath = uploadPath({ experimentId: setup.experimentId, step: 10 }, file.length);
    const response = await callRoute(
      uploadRoute,
      uploadPath({ experimentId: setup.experimentId, step: 11 }, file.length),
      {
        method: "POST",
        params: { id: setup.experimentId },
        body: file,
        headers: {
          "content-type": "application/octet-stream",
          authorization: signedAuthorization({
            node: setup.aux,
            path: signedPath,
            body: { sha256: sha256(file) },
          }),
        },
      },
    );
    expect(await errorCode(response)).toEqual({ status: 401, code: "REQUEST_WRONG_SCOPE" });
    await expectNothingStored();
  });

  it("refuses malformed metadata (INVALID_INPUT) and trainers (PASS_WRONG_ROLE)", async () => {
    const file = new Uint8Array(randomBytes(1000));
    for (const query of [
      "step=-1&sizeBytes=1000",
      "step=1&sizeBytes=0",
      "step=1&loss=abc&sizeBytes=1000",
      "step=1",
    ]) {
      const path = `/api/v1/experiments/${setup.experimentId}/checkpoints?${query}`;
      const response = await callRoute(uploadRoute, path, {
        method: "POST",
        params: { id: setup.experimentId },
        body: file,
        headers: {
          "content-type": "application/octet-stream",
          authorization: signedAuthorization({ node: setup.aux, path, body: { sha256: sha256(file) } }),
        },
      });
      expect(await errorCode(response), query).toEqual({ status: 400, code: "INVALID_INPUT" });
    }

    const volunteer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, volunteer, "approved");
    const trainer = await joinNode(setup.experimentId, await createToken(app, setup.experimentId, volunteer));
    const response = await upload({ node: trainer, experimentId: setup.experimentId, step: 1, body: file });
    expect(await errorCode(response)).toEqual({ status: 401, code: "PASS_WRONG_ROLE" });
    await expectNothingStored();
  });

  it("answers 404 for an unknown checkpoint or one of another experiment", async () => {
    const file = new Uint8Array(randomBytes(1000));
    const other = await setUpAux(app);
    const response = await upload({ node: other.aux, experimentId: other.experimentId, step: 1, body: file });
    const created = (await response.json()) as CheckpointView;
    expect(await errorCode(await download(created.id))).toEqual({ status: 404, code: "NOT_FOUND" });
    expect(await errorCode(await download("nope"))).toEqual({ status: 404, code: "NOT_FOUND" });
  });
});
