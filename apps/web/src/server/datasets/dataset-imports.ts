import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type {
  CreateDatasetImportInput,
  DatasetImportStatus,
  DatasetImportView,
} from "../../api/schemas/datasets.ts";
import { AppError, AppErrorCode } from "../app-error.ts";
import type { AppContext } from "../context.ts";
import { findOwnUpload, findUpload, removeUpload } from "../uploads/upload-server.ts";
import { convertCsv, CsvImportError } from "./csv-import.ts";
import { convertImageArchive, ImageImportError } from "./image-import.ts";
import { convertText, TextImportError } from "./text-import.ts";
import { buildUploadedDataset, type ImportProgress } from "./uploaded-dataset.ts";
import { datasetExists, DatasetExistsError } from "./dataset-publish.ts";
import { DATASET_NAMES } from "./prepare-datasets.ts";
import type { SessionUser } from "../records.ts";

/**
 * Imports of uploaded files into datasets. `POST /api/v1/datasets/imports` checks the request and
 * the upload, writes a `DatasetImport` row (queued) and hands the conversion to this process's
 * queue, which runs one conversion at a time in the background; `GET /api/v1/datasets/imports/{id}`
 * reads the row. While a conversion runs, its row gets the bytes read and rows converted at most
 * about once a second.
 *
 * Interrupted conversions. A conversion lives in the memory of the web process that accepted it,
 * so a restart or a crash ends it without a word. Every queued or converting row names its worker
 * (a random id of the process) and carries a heartbeat that the worker renews every few seconds
 * (progress writes count). A read marks such a row failed when the worker is this very process but
 * the job is no longer in its memory, or when the heartbeat is older than STALE_AFTER_MS (the worker,
 * this process before a restart or another instance, is gone). A live job's row is therefore never
 * failed by a read, on any instance that shares the database.
 */

export const ImportStatus = {
  queued: "queued",
  converting: "converting",
  ready: "ready",
  failed: "failed",
} as const satisfies Record<DatasetImportStatus, DatasetImportStatus>;

/** `/api/v1/datasets/imports` would hide a dataset of this name from `/api/v1/datasets/{name}`. */
const RESERVED_NAMES = new Set(["imports"]);

const ACTIVE: DatasetImportStatus[] = [ImportStatus.queued, ImportStatus.converting];
/** How often a live job renews its heartbeat. */
export const HEARTBEAT_MS = 5_000;
/** A queued or converting row whose heartbeat is older than this has no live worker. */
export const STALE_AFTER_MS = 30_000;
/** Progress is written to the row at most this often. */
const PROGRESS_WRITE_MS = 1_000;
/** Conversions that run at once in one process; the others wait, queued. */
const CONCURRENT_CONVERSIONS = 1;

export const INTERRUPTED_MESSAGE =
  "the conversion stopped before it finished (the platform restarted or the process running it ended); start the import again";

interface Job {
  readonly ctx: AppContext;
  readonly id: string;
  readonly name: string;
  readonly controller: AbortController;
}

interface ImportState {
  /** This process, as the `worker` of the rows it converts. */
  readonly worker: string;
  /** Jobs queued or running in this process, by import id. */
  readonly live: Map<string, Job>;
  /** Dataset names with a job in this process (or being checked for one). */
  readonly names: Set<string>;
  readonly queue: Job[];
  running: number;
}

const holder = globalThis as typeof globalThis & { __barnraiseDatasetImports?: ImportState };

function state(): ImportState {
  holder.__barnraiseDatasetImports ??= {
    worker: randomUUID(),
    live: new Map(),
    names: new Set(),
    queue: [],
    running: 0,
  };
  return holder.__barnraiseDatasetImports;
}

interface ImportRow {
  id: string;
  name: string;
  ownerId: string;
  status: string;
  bytesDone: bigint;
  bytesTotal: bigint;
  records: bigint;
  error: string | null;
  worker: string | null;
  heartbeatAt: Date | null;
}

export function toDatasetImportView(row: ImportRow): DatasetImportView {
  return {
    id: row.id,
    name: row.name,
    status: row.status as DatasetImportStatus,
    bytesDone: Number(row.bytesDone),
    bytesTotal: Number(row.bytesTotal),
    records: Number(row.records),
    error: row.error,
  };
}

/**
 * Starts importing the caller's finished upload as dataset `input.name`: 202 material. CONFLICT
 * when the name is taken (a dataset, a prepared dataset's name, or an import under way), NOT_FOUND
 * or FORBIDDEN for an upload that is missing or someone else's, CONFLICT when it is unfinished.
 */
export async function createDatasetImport(
  ctx: AppContext,
  user: SessionUser,
  input: CreateDatasetImportInput,
): Promise<DatasetImportView> {
  const { name } = input;
  if (DATASET_NAMES.includes(name)) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `"${name}" is the name of a dataset the platform prepares itself; choose another name`,
    );
  }
  if (RESERVED_NAMES.has(name)) {
    throw new AppError(
      AppErrorCode.CONFLICT,
      `"${name}" is reserved by the API's paths; choose another name`,
    );
  }
  const jobs = state();
  // Reserved before the first await, so two requests for one name cannot both pass the checks.
  if (jobs.names.has(name)) throw importUnderWay(name);
  jobs.names.add(name);
  let started = false;
  try {
    if (await datasetExists(ctx.storage, name)) {
      throw new AppError(AppErrorCode.CONFLICT, `a dataset named "${name}" already exists`);
    }
    const others = await ctx.db.datasetImport.findMany({ where: { name, status: { in: ACTIVE } } });
    for (const other of others) {
      if ((await failIfStale(ctx, other)).status !== ImportStatus.failed) throw importUnderWay(name);
    }
    const upload = await findOwnUpload(ctx, user, input.uploadId);
    if (upload.size === undefined || upload.offset < upload.size) {
      const total = upload.size === undefined ? "an undeclared length" : `${upload.size}`;
      throw new AppError(
        AppErrorCode.CONFLICT,
        `the upload is not complete: ${upload.offset} of ${total} bytes received; finish it first`,
      );
    }
    const row = await ctx.db.datasetImport.create({
      data: {
        name,
        ownerId: user.id,
        uploadId: upload.id,
        fileName: upload.fileName,
        kind: input.format,
        ...formatColumns(input),
        status: ImportStatus.queued,
        // A text file is read twice (words counted, then encoded).
        bytesTotal: BigInt(input.format === "text" ? 2 * upload.size : upload.size),
        worker: jobs.worker,
        heartbeatAt: new Date(ctx.now()),
      },
    });
    enqueue({ ctx, id: row.id, name, controller: new AbortController() });
    started = true;
    return toDatasetImportView(row);
  } finally {
    if (!started) jobs.names.delete(name);
  }
}

/** The row's columns for the options of the import's format. */
function formatColumns(input: CreateDatasetImportInput) {
  switch (input.format) {
    case "csv":
      return { labelColumn: input.labelColumn ?? null, labelKind: input.labelKind };
    case "images":
      return { imageWidth: input.width, imageHeight: input.height, imageChannels: input.channels };
    case "text":
      return { vocabSize: input.vocabSize ?? null };
  }
}

function importUnderWay(name: string): AppError {
  return new AppError(AppErrorCode.CONFLICT, `dataset "${name}" is already being imported`);
}

/** The caller's import; an interrupted one is marked failed first (see the module comment). */
export async function readDatasetImport(
  ctx: AppContext,
  user: SessionUser,
  id: string,
): Promise<DatasetImportView> {
  const row = await ctx.db.datasetImport.findUnique({ where: { id } });
  if (row === null) throw new AppError(AppErrorCode.NOT_FOUND, `there is no dataset import "${id}"`);
  if (row.ownerId !== user.id)
    throw new AppError(AppErrorCode.FORBIDDEN, "this import belongs to another user");
  return toDatasetImportView(await failIfStale(ctx, row));
}

/** The row, marked failed when it is queued or converting without a live worker. */
async function failIfStale(ctx: AppContext, row: ImportRow): Promise<ImportRow> {
  if (!ACTIVE.includes(row.status as DatasetImportStatus)) return row;
  const jobs = state();
  if (jobs.live.has(row.id)) return row;
  const beat = row.heartbeatAt?.getTime() ?? 0;
  const orphaned = row.worker === jobs.worker || ctx.now() - beat > STALE_AFTER_MS;
  if (!orphaned) return row;
  // Only if nothing changed since the read: a worker that wrote meanwhile is alive.
  const marked = await ctx.db.datasetImport.updateMany({
    where: { id: row.id, status: row.status, heartbeatAt: row.heartbeatAt },
    data: { status: ImportStatus.failed, error: INTERRUPTED_MESSAGE },
  });
  return marked.count === 1
    ? { ...row, status: ImportStatus.failed, error: INTERRUPTED_MESSAGE }
    : await ctx.db.datasetImport.findUniqueOrThrow({ where: { id: row.id } });
}

function enqueue(job: Job): void {
  const jobs = state();
  jobs.live.set(job.id, job);
  jobs.queue.push(job);
  pump();
}

function pump(): void {
  const jobs = state();
  while (jobs.running < CONCURRENT_CONVERSIONS) {
    const job = jobs.queue.shift();
    if (job === undefined) return;
    jobs.running += 1;
    void runJob(job).finally(() => {
      jobs.running -= 1;
      jobs.live.delete(job.id);
      jobs.names.delete(job.name);
      pump();
    });
  }
}

/** Stops every conversion of this process (for tests and shutdown); their rows are marked failed. */
export async function stopDatasetImports(): Promise<void> {
  const jobs = state();
  const live = [...jobs.live.values()];
  for (const job of live) job.controller.abort(new Error("the platform is shutting down"));
  await waitForDatasetImports();
}

/** Resolves once no conversion is queued or running in this process. */
export async function waitForDatasetImports(): Promise<void> {
  while (state().live.size > 0) {
    await new Promise((resolve) => {
      setTimeout(resolve, 10);
    });
  }
}

async function runJob(job: Job): Promise<void> {
  const { ctx, id } = job;
  const heartbeat = setInterval(() => {
    void ctx.db.datasetImport
      .updateMany({ where: { id, status: { in: ACTIVE } }, data: { heartbeatAt: new Date(ctx.now()) } })
      .catch((error: unknown) => {
        ctx.logger.warn({ err: error, importId: id }, "import heartbeat failed");
      });
  }, HEARTBEAT_MS);
  heartbeat.unref();

  // Progress writes: the latest values, written at most once a second, one write at a time.
  let latest: { bytesDone: bigint; records: bigint } | undefined;
  let lastWrite = Number.NEGATIVE_INFINITY;
  let writing: Promise<void> = Promise.resolve();
  const writeProgress = () => {
    const values = latest;
    if (values === undefined) return;
    latest = undefined;
    lastWrite = performance.now();
    writing = writing.then(async () => {
      try {
        await ctx.db.datasetImport.update({
          where: { id },
          data: { ...values, heartbeatAt: new Date(ctx.now()) },
        });
      } catch (error) {
        ctx.logger.warn({ err: error, importId: id }, "import progress write failed");
      }
    });
  };

  try {
    if (job.controller.signal.aborted) throw job.controller.signal.reason;
    const row = await ctx.db.datasetImport.update({
      where: { id },
      data: { status: ImportStatus.converting, worker: state().worker, heartbeatAt: new Date(ctx.now()) },
    });
    const upload = await findUpload(ctx, row.uploadId);
    const onProgress = ({ bytesRead, records }: ImportProgress) => {
      latest = { bytesDone: BigInt(bytesRead), records: BigInt(records) };
      if (performance.now() - lastWrite >= PROGRESS_WRITE_MS) writeProgress();
    };
    const common = {
      source: upload.path,
      name: row.name,
      fileName: row.fileName,
      signal: job.controller.signal,
      onProgress,
    };
    const manifest = await buildUploadedDataset(ctx.storage, row.name, async (dir) => {
      if (row.kind === "images") {
        return await convertImageArchive({
          ...common,
          dir,
          width: row.imageWidth ?? 0,
          height: row.imageHeight ?? 0,
          channels: row.imageChannels === 1 ? 1 : 3,
        });
      }
      if (row.kind === "text")
        return await convertText({ ...common, dir, vocabSize: row.vocabSize ?? undefined });
      return await convertCsv({
        ...common,
        dir,
        labelColumn: row.labelColumn ?? undefined,
        labelKind: row.labelKind === "value" ? "value" : "class",
        onHeader: ({ labelColumn }) => {
          if (row.labelColumn === null) {
            writing = writing.then(async () => {
              await ctx.db.datasetImport
                .update({ where: { id }, data: { labelColumn } })
                .catch(() => undefined);
            });
          }
        },
      });
    });
    await writing;
    const records = manifest.splits.train.records + manifest.splits.test.records;
    await ctx.db.datasetImport.update({
      where: { id },
      data: {
        status: ImportStatus.ready,
        bytesDone: row.bytesTotal,
        records: BigInt(records),
        error: null,
        heartbeatAt: new Date(ctx.now()),
      },
    });
    // The dataset holds everything the file did: its bytes are not needed any more.
    await removeUpload(ctx, row.uploadId).catch((error: unknown) => {
      ctx.logger.warn({ err: error, importId: id }, "could not remove an imported upload");
    });
    ctx.logger.info({ importId: id, dataset: row.name, records }, "dataset imported");
  } catch (error) {
    await writing;
    const message = failureMessage(error);
    if (!(isFileError(error) || error instanceof AppError)) {
      ctx.logger.error({ err: error, importId: id }, "dataset import failed");
    }
    await ctx.db.datasetImport
      .update({ where: { id }, data: { status: ImportStatus.failed, error: message } })
      .catch((writeError: unknown) => {
        ctx.logger.error({ err: writeError, importId: id }, "could not record a failed import");
      });
  } finally {
    clearInterval(heartbeat);
  }
}

/** A refusal of the file (or of the name), whose message is for the organizer as it is. */
function isFileError(error: unknown): error is Error {
  return (
    error instanceof CsvImportError ||
    error instanceof ImageImportError ||
    error instanceof TextImportError ||
    error instanceof DatasetExistsError
  );
}

function failureMessage(error: unknown): string {
  if (isFileError(error) || error instanceof AppError) return error.message;
  const text = error instanceof Error ? error.message : String(error);
  return `the conversion failed: ${text}`;
}
