/**
 * Dataset import throughput and memory: a generated CSV converted into a `tabular-f32` dataset, and
 * the same file uploaded with tus-js-client through the upload route handler on loopback, then
 * imported through the import routes (the path an organizer's browser takes).
 *
 *   node bench/dataset-import.ts                 # a 1 GB CSV (1,000 MB)
 *   node bench/dataset-import.ts --mb 200        # a smaller file
 *   node bench/dataset-import.ts --mb 200 --no-upload   # the conversion only
 *   node bench/dataset-import.ts --dir /big/disk  # where the files go (default: the OS temp dir)
 *   node bench/dataset-import.ts --capped         # also convert in a child whose V8 heap is capped at 48 MiB
 *
 * The CSV has 16 numeric features and a class label (10 classes), about 140 bytes a row. Each phase
 * prints MB/s (10^6 bytes of CSV per second) and the peak resident memory sampled while it ran: the
 * conversion streams, so its peak stays flat whatever the file's size (`--capped` proves it: a child
 * process with a 48 MiB old space and 4 MiB semi-spaces converts the whole file; its maxRSS is printed). The upload phase runs the
 * client and the server in this one process (loopback HTTP, SQLite), so its memory is both together.
 * Everything is deleted at the end.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { importCsvDataset } from "../apps/web/src/server/datasets/csv-import.ts";
import { LocalObjectStore } from "../apps/web/src/server/storage/local-object-store.ts";

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const index = args.indexOf(name);
  return index >= 0 ? args[index + 1] : undefined;
};
const megabytes = Number(option("--mb") ?? 1000);
const withUpload = !args.includes("--no-upload");
const capped = args.includes("--capped");
if (!Number.isFinite(megabytes) || megabytes <= 0) throw new Error("--mb must be a positive number");

const FEATURES = 16;
const CLASSES = 10;
const AUTH_SECRET = "bench-auth-secret-0123456789abcdef0123456789";
const COOKIE_NAME = "authjs.session-token";
const MB = 1e6;
const GENERATE = "--generate-csv";
const CONVERT = "--convert-csv";
const CAPPED_HEAP_MIB = 48;

/** Peak RSS while `run` runs, sampled every 20 ms (and at both ends). */
async function measured<T>(
  run: () => Promise<T>,
): Promise<{ value: T; seconds: number; peakRss: number; startRss: number }> {
  const startRss = process.memoryUsage().rss;
  let peak = startRss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 20);
  const start = performance.now();
  try {
    const value = await run();
    peak = Math.max(peak, process.memoryUsage().rss);
    return { value, seconds: (performance.now() - start) / 1000, peakRss: peak, startRss };
  } finally {
    clearInterval(sampler);
  }
}

/** Writes a CSV of about `bytes` bytes: deterministic values from a small linear congruential generator. */
async function generateCsv(path: string, bytes: number): Promise<{ bytes: number; rows: number }> {
  const out = createWriteStream(path, { highWaterMark: 4 << 20 });
  const header = [...Array.from({ length: FEATURES }, (_, i) => `f${i}`), "label"].join(",");
  out.write(`${header}\n`);
  let written = header.length + 1;
  let rows = 0;
  let seed = 12345;
  const next = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed;
  };
  while (written < bytes) {
    const lines: string[] = [];
    for (let i = 0; i < 20_000 && written < bytes; i += 1) {
      const fields: string[] = [];
      for (let f = 0; f < FEATURES; f += 1) fields.push(((next() % 2_000_000) / 1000 - 1000).toFixed(3));
      fields.push(String(next() % CLASSES));
      const line = `${fields.join(",")}\n`;
      lines.push(line);
      written += line.length;
      rows += 1;
    }
    if (!out.write(lines.join(""))) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  return { bytes: (await stat(path)).size, rows };
}

type Handler = (req: Request, context: { params: Promise<Record<string, unknown>> }) => Promise<Response>;

/** The routes this bench needs, served as the Next.js server serves route handlers. */
async function serve(): Promise<{ origin: string; close: () => Promise<void> }> {
  const uploadRoute = await import("../apps/web/app/api/v1/uploads/[[...id]]/route.ts");
  const importRoute = await import("../apps/web/app/api/v1/datasets/imports/route.ts");
  const importStatusRoute = await import("../apps/web/app/api/v1/datasets/imports/[id]/route.ts");
  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      console.error(error);
      res.destroy();
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", origin);
    const parts = url.pathname.split("/").slice(1);
    let handler: Handler | undefined;
    let params: Record<string, unknown> = {};
    const method = req.method ?? "GET";
    if (url.pathname === "/api/v1/uploads" || url.pathname.startsWith("/api/v1/uploads/")) {
      handler = (uploadRoute as unknown as Record<string, Handler | undefined>)[method];
      params = { id: parts.slice(3) };
    } else if (url.pathname === "/api/v1/datasets/imports") {
      handler = (importRoute as unknown as Record<string, Handler | undefined>)[method];
    } else if (parts.length === 5 && url.pathname.startsWith("/api/v1/datasets/imports/")) {
      handler = (importStatusRoute as unknown as Record<string, Handler | undefined>)[method];
      params = { id: parts[4] };
    }
    if (handler === undefined) {
      res.writeHead(404).end();
      return;
    }
    const headers = new Headers();
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      headers.append(req.rawHeaders[i] ?? "", req.rawHeaders[i + 1] ?? "");
    }
    const hasBody = method !== "GET" && method !== "HEAD";
    const request = new Request(url, {
      method,
      headers,
      ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: "half" } : {}),
    });
    const response = await handler(request, { params: Promise.resolve(params) });
    res.statusCode = response.status;
    response.headers.forEach((value, name) => {
      res.setHeader(name, value);
    });
    if (response.body === null || method === "HEAD") {
      res.end();
      return;
    }
    await pipeline(Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>), res);
  }

  return {
    origin,
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, "close");
    },
  };
}

function row(
  label: string,
  bytes: number,
  result: { seconds: number; peakRss: number; startRss: number },
  extra = "",
): void {
  const rate = bytes / MB / result.seconds;
  const mib = (value: number) => (value / 2 ** 20).toFixed(0);
  console.log(
    `${label.padEnd(30)} ${result.seconds.toFixed(1).padStart(7)} s ${rate.toFixed(1).padStart(8)} MB/s ` +
      `peak RSS ${mib(result.peakRss).padStart(5)} MiB (+${mib(result.peakRss - result.startRss)} over its start)${extra}`,
  );
}

/** Generates the CSV in a child process, so its garbage does not count in this one's memory. */
async function generateInChild(path: string, bytes: number): Promise<{ bytes: number; rows: number }> {
  const child = spawn(process.execPath, [import.meta.filename, GENERATE, path, String(bytes)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let output = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`the CSV generator exited with ${code}`);
  return JSON.parse(output) as { bytes: number; rows: number };
}

/** Converts the CSV in a child process whose V8 heap is capped: it finishes only if it streams. */
async function convertInChild(
  path: string,
  dataDir: string,
): Promise<{ seconds: number; records: number; maxRss: number }> {
  const child = spawn(
    process.execPath,
    [
      `--max-old-space-size=${CAPPED_HEAP_MIB}`,
      "--max-semi-space-size=4",
      import.meta.filename,
      CONVERT,
      path,
      dataDir,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let output = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`the capped conversion exited with ${code}`);
  return JSON.parse(output) as { seconds: number; records: number; maxRss: number };
}

if (args[0] === GENERATE) {
  process.stdout.write(JSON.stringify(await generateCsv(args[1] ?? "", Number(args[2]))));
  process.exit(0);
}
if (args[0] === CONVERT) {
  const start = performance.now();
  const manifest = await importCsvDataset({
    storage: new LocalObjectStore(args[2] ?? ""),
    source: args[1] ?? "",
    name: "bench",
    fileName: "bench.csv",
    labelKind: "class",
  });
  process.stdout.write(
    JSON.stringify({
      seconds: (performance.now() - start) / 1000,
      records: manifest.splits.train.records + manifest.splits.test.records,
      maxRss: process.resourceUsage().maxRSS * 1024,
    }),
  );
  process.exit(0);
}

const work = await mkdtemp(join(option("--dir") ?? tmpdir(), "barnraise-bench-import-"));
try {
  console.log(`Node ${process.version}; files in ${work}`);
  const csv = join(work, "bench.csv");
  const generated = await measured(() => generateInChild(csv, megabytes * MB));
  const { bytes, rows } = generated.value;
  console.log(
    `generated ${(bytes / MB).toFixed(0)} MB, ${rows.toLocaleString("en")} rows, in ${generated.seconds.toFixed(1)} s ` +
      `(in a child process); this process's RSS ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB`,
  );

  const converted = await measured(() =>
    importCsvDataset({
      storage: new LocalObjectStore(join(work, "direct")),
      source: csv,
      name: "bench",
      fileName: "bench.csv",
      labelKind: "class",
    }),
  );
  const manifest = converted.value;
  const records = manifest.splits.train.records + manifest.splits.test.records;
  if (records !== rows) throw new Error(`converted ${records} records of ${rows} rows`);
  row(
    "convert (importCsvDataset)",
    bytes,
    converted,
    `, ${((records / converted.seconds) | 0).toLocaleString("en")} rows/s, ${manifest.shards.length} shards`,
  );
  await rm(join(work, "direct"), { recursive: true, force: true });

  if (capped) {
    const child = await convertInChild(csv, join(work, "capped"));
    if (child.records !== rows)
      throw new Error(`the capped conversion wrote ${child.records} of ${rows} rows`);
    console.log(
      `${"convert, V8 heap capped".padEnd(30)} ${child.seconds.toFixed(1).padStart(7)} s ${(bytes / MB / child.seconds).toFixed(1).padStart(8)} MB/s ` +
        `maxRSS ${(child.maxRss / 2 ** 20).toFixed(0).padStart(5)} MiB (a child process: --max-old-space-size=${CAPPED_HEAP_MIB} --max-semi-space-size=4)`,
    );
    await rm(join(work, "capped"), { recursive: true, force: true });
  }

  if (withUpload) {
    // Loaded only here, so the child processes above stay small.
    const { encode } = await import("@auth/core/jwt");
    const tus = await import("tus-js-client");
    const { migrateTestDatabase } = await import("../prisma/src/testing.ts");
    const { createAppContext, installAppContext } = await import("../apps/web/src/server/context.ts");
    const { loadServerEnv } = await import("../apps/web/src/server/env.ts");
    const dataDir = join(work, "platform");
    const databaseUrl = `file:${join(work, "bench.db")}`;
    await migrateTestDatabase(databaseUrl);
    const ctx = createAppContext(
      loadServerEnv({
        NODE_ENV: "production",
        AUTH_SECRET,
        BARNRAISE_SECRET: "bench-sealing-secret-0123456789abcdef01234567",
        DATABASE_URL: databaseUrl,
        BARNRAISE_DATA_DIR: dataDir,
        BARNRAISE_MAX_UPLOAD_BYTES: String(Math.max(bytes, 1024)),
        LOG_LEVEL: "silent",
      }),
    );
    installAppContext(ctx);
    const http = await serve();
    try {
      const user = await ctx.db.user.create({ data: { username: "bench" } });
      const token = await encode({
        token: { sub: user.id, username: user.username },
        secret: AUTH_SECRET,
        salt: COOKIE_NAME,
      });
      const cookie = `${COOKIE_NAME}=${token}`;

      const uploaded = await measured(
        () =>
          new Promise<string>((resolve, reject) => {
            const task = new tus.Upload(createReadStream(csv), {
              endpoint: `${http.origin}/api/v1/uploads`,
              headers: { cookie },
              chunkSize: 64 * 2 ** 20,
              metadata: { filename: "bench.csv", filetype: "text/csv" },
              retryDelays: null,
              onSuccess: () => {
                resolve(new URL(task.url ?? "").pathname.split("/").at(-1) ?? "");
              },
              onError: reject,
            });
            task.start();
          }),
      );
      row("upload (tus, loopback HTTP)", bytes, uploaded, ", 64 MiB PATCH requests");

      const imported = await measured(async () => {
        const created = await fetch(`${http.origin}/api/v1/datasets/imports`, {
          method: "POST",
          headers: { cookie, "content-type": "application/json" },
          body: JSON.stringify({
            name: "bench",
            uploadId: uploaded.value,
            format: "csv",
            labelKind: "class",
          }),
        });
        if (created.status !== 202) throw new Error(`import: ${created.status} ${await created.text()}`);
        const { id } = (await created.json()) as { id: string };
        let polls = 0;
        for (;;) {
          const read = await fetch(`${http.origin}/api/v1/datasets/imports/${id}`, { headers: { cookie } });
          const view = (await read.json()) as { status: string; error: string | null; records: number };
          polls += 1;
          if (view.status === "ready") return { records: view.records, polls };
          if (view.status === "failed") throw new Error(`import failed: ${view.error ?? ""}`);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      });
      if (imported.value.records !== rows)
        throw new Error(`imported ${imported.value.records} of ${rows} rows`);
      row("import (POST + poll the job)", bytes, imported, `, ${imported.value.polls} polls`);
    } finally {
      await http.close();
      installAppContext(undefined);
      await ctx.db.$disconnect();
    }
  }
  console.log(`peak RSS of the whole run (maxRSS) ${(process.resourceUsage().maxRSS / 1024).toFixed(0)} MiB`);
} finally {
  await rm(work, { recursive: true, force: true });
}
