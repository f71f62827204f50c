import { mkdtemp, readdir, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppErrorCode } from "../src/server/app-error.ts";
import { fileResponse, parseRange } from "../src/server/http/byte-range.ts";

const SIZE = 1000;
const bytes = Uint8Array.from({ length: SIZE }, (_, i) => (i * 7 + 3) % 256);
const ETAG = "c0ffee";

let dir: string;
let path: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-range-"));
  path = join(dir, "file.bin");
  await writeFile(path, bytes);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function get(headers: Record<string, string> = {}, method = "GET"): Promise<Response> {
  const req = new Request("http://localhost/file", { method, headers });
  return fileResponse(req, { path, size: SIZE, contentType: "application/octet-stream", etag: ETAG });
}

async function body(res: Response): Promise<Uint8Array> {
  return new Uint8Array(await res.arrayBuffer());
}

describe("fileResponse", () => {
  it("serves the whole file with its length, type, ETag and Accept-Ranges", async () => {
    const res = await get();
    expect(res.status).toBe(200);
    expect(res.headers.get("content-length")).toBe(String(SIZE));
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    expect(res.headers.get("accept-ranges")).toBe("bytes");
    expect(res.headers.get("etag")).toBe(`"${ETAG}"`);
    expect(res.headers.get("content-range")).toBeNull();
    expect(await body(res)).toEqual(bytes);
  });

  it("serves bytes=0-9 as 206 with Content-Range", async () => {
    const res = await get({ range: "bytes=0-9" });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 0-9/${SIZE}`);
    expect(res.headers.get("content-length")).toBe("10");
    expect(await body(res)).toEqual(bytes.slice(0, 10));
  });

  it("serves an open range bytes=10- to the end", async () => {
    const res = await get({ range: "bytes=10-" });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 10-${SIZE - 1}/${SIZE}`);
    expect(await body(res)).toEqual(bytes.slice(10));
  });

  it("serves a suffix range bytes=-5 as the last five bytes", async () => {
    const res = await get({ range: "bytes=-5" });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes ${SIZE - 5}-${SIZE - 1}/${SIZE}`);
    expect(await body(res)).toEqual(bytes.slice(SIZE - 5));
  });

  it("serves a suffix longer than the file as the whole file, in a 206", async () => {
    const res = await get({ range: "bytes=-5000" });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 0-${SIZE - 1}/${SIZE}`);
    expect(await body(res)).toEqual(bytes);
  });

  it("clamps an end beyond the file to its last byte", async () => {
    const res = await get({ range: `bytes=990-${SIZE + 500}` });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 990-${SIZE - 1}/${SIZE}`);
    expect(res.headers.get("content-length")).toBe("10");
    expect(await body(res)).toEqual(bytes.slice(990));
  });

  it("serves a single byte in the middle", async () => {
    const res = await get({ range: "bytes=500-500" });
    expect(res.status).toBe(206);
    expect(await body(res)).toEqual(bytes.slice(500, 501));
  });

  it("answers a range starting at or past the end with 416 RANGE_NOT_SATISFIABLE", async () => {
    for (const range of [`bytes=${SIZE}-`, `bytes=${SIZE + 10}-${SIZE + 20}`, "bytes=-0"]) {
      const res = await get({ range });
      expect(res.status).toBe(416);
      expect(res.headers.get("content-range")).toBe(`bytes */${SIZE}`);
      const json = (await res.json()) as { error: { code: string; message: string } };
      expect(json.error.code).toBe(AppErrorCode.RANGE_NOT_SATISFIABLE);
      expect(json.error.message).toMatch(/1000 bytes/);
    }
  });

  it("ignores malformed, multi-range and non-byte Range headers and serves the whole file", async () => {
    for (const range of ["bytes=abc", "bytes=9-3", "bytes=-", "items=0-9", "bytes=0-9,20-29", "0-9"]) {
      const res = await get({ range });
      expect(res.status, range).toBe(200);
      expect(res.headers.get("content-range")).toBeNull();
      expect(await body(res)).toEqual(bytes);
    }
  });

  it("answers 304 without a body when If-None-Match matches the ETag", async () => {
    for (const tag of [`"${ETAG}"`, `"other", W/"${ETAG}"`, "*"]) {
      const res = await get({ "if-none-match": tag, range: "bytes=0-9" });
      expect(res.status, tag).toBe(304);
      expect(res.headers.get("etag")).toBe(`"${ETAG}"`);
      expect(res.body).toBeNull();
    }
    const other = await get({ "if-none-match": '"something-else"' });
    expect(other.status).toBe(200);
    expect(await body(other)).toEqual(bytes);
  });

  it("honours Range only if If-Range still matches the ETag", async () => {
    const fresh = await get({ range: "bytes=0-9", "if-range": `"${ETAG}"` });
    expect(fresh.status).toBe(206);
    expect(await body(fresh)).toEqual(bytes.slice(0, 10));
    const stale = await get({ range: "bytes=0-9", "if-range": '"older"' });
    expect(stale.status).toBe(200);
    expect(await body(stale)).toEqual(bytes);
  });

  it("answers HEAD with the GET's headers and no body", async () => {
    const res = await get({ range: "bytes=0-9" }, "HEAD");
    expect(res.status).toBe(206);
    expect(res.headers.get("content-length")).toBe("10");
    expect(res.body).toBeNull();
  });

  it("sets Cache-Control and Content-Disposition when asked", async () => {
    const req = new Request("http://localhost/file");
    const res = await fileResponse(req, {
      path,
      size: SIZE,
      contentType: "application/octet-stream",
      filename: 'step "10".bin',
      cacheControl: "public, max-age=3600",
    });
    expect(res.headers.get("cache-control")).toBe("public, max-age=3600");
    expect(res.headers.get("content-disposition")).toBe(
      `attachment; filename="step _10_.bin"; filename*=UTF-8''step%20%2210%22.bin`,
    );
    // Without an etag, a weak one is derived from the file.
    expect(res.headers.get("etag")).toMatch(/^W\/"3e8-[0-9a-f]+"$/);
    await res.body?.cancel();
  });

  it("keeps an already quoted ETag as it is", async () => {
    const req = new Request("http://localhost/file");
    const res = await fileResponse(req, { path, size: SIZE, contentType: "x/y", etag: '"abc"' });
    expect(res.headers.get("etag")).toBe('"abc"');
    await res.body?.cancel();
  });

  it("throws NOT_FOUND for a missing file", async () => {
    const req = new Request("http://localhost/file");
    await expect(
      fileResponse(req, { path: join(dir, "missing.bin"), size: 1, contentType: "x/y" }),
    ).rejects.toMatchObject({ code: AppErrorCode.NOT_FOUND });
  });

  it("serves an empty file, and refuses any range of it", async () => {
    const empty = join(dir, "empty.bin");
    await writeFile(empty, new Uint8Array(0));
    const file = { path: empty, size: 0, contentType: "application/octet-stream", etag: "e" };
    const whole = await fileResponse(new Request("http://localhost/e"), file);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("content-length")).toBe("0");
    expect((await body(whole)).byteLength).toBe(0);
    const ranged = await fileResponse(
      new Request("http://localhost/e", { headers: { range: "bytes=-1" } }),
      file,
    );
    expect(ranged.status).toBe(416);
    expect(ranged.headers.get("content-range")).toBe("bytes */0");
  });
});

describe("fileResponse streaming", () => {
  const BIG = 1024 * 1024 + 123;
  const big = Uint8Array.from({ length: BIG }, (_, i) => (i * 31 + (i >> 8)) % 256);
  let bigPath: string;

  beforeAll(async () => {
    bigPath = join(dir, "big.bin");
    await writeFile(bigPath, big);
  });

  /** How many of this process's file descriptors point at `target` (Linux /proc). */
  async function openDescriptors(target: string): Promise<number> {
    const fds = await readdir("/proc/self/fd");
    const links = await Promise.all(fds.map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => "")));
    return links.filter((link) => link === target).length;
  }

  const serveBig = (headers: Record<string, string> = {}) =>
    fileResponse(new Request("http://localhost/big", { headers }), {
      path: bigPath,
      size: BIG,
      contentType: "application/octet-stream",
      etag: "big",
    });

  it("streams a file of many chunks intact, and closes it at the end", async () => {
    const res = await serveBig();
    expect(await openDescriptors(bigPath)).toBe(1);
    expect(await body(res)).toEqual(big);
    const ranged = await serveBig({ range: "bytes=70000-900000" });
    expect(await body(ranged)).toEqual(big.slice(70000, 900001));
    expect(await openDescriptors(bigPath)).toBe(0);
  });

  it("closes the file, without an uncaught error, when the client goes away mid-download", async () => {
    const res = await serveBig();
    // A slow client: the stream fills its queue and waits on backpressure before the first read.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const reader = res.body?.getReader();
    if (reader === undefined) throw new Error("no body");
    const first = await reader.read();
    expect(first.value?.byteLength).toBeGreaterThan(0);
    // The read made room in the queue, so the source is about to read more: go away right then.
    await reader.cancel();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await openDescriptors(bigPath)).toBe(0);
  });
});

describe("parseRange", () => {
  it("parses the three single-range forms and tolerates spaces and case", () => {
    expect(parseRange("bytes=0-9", 100)).toEqual({ start: 0, end: 9 });
    expect(parseRange("bytes=90-", 100)).toEqual({ start: 90, end: 99 });
    expect(parseRange("bytes=-10", 100)).toEqual({ start: 90, end: 99 });
    expect(parseRange(" Bytes = 1 - 2 ", 100)).toEqual({ start: 1, end: 2 });
  });

  it("tells unsatisfiable ranges from ones to ignore", () => {
    expect(parseRange("bytes=100-", 100)).toBe("unsatisfiable");
    expect(parseRange("bytes=-0", 100)).toBe("unsatisfiable");
    expect(parseRange("bytes=5-1", 100)).toBeUndefined();
    expect(parseRange("bytes=99999999999999999999-", 100)).toBeUndefined();
    expect(parseRange("bytes=0-1, 3-4", 100)).toBeUndefined();
  });
});
