import { createReadStream } from "node:fs";
import { rm } from "node:fs/promises";
import { once } from "node:events";
import { PassThrough, type Readable } from "node:stream";
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import {
  assertObjectKey,
  assertObjectPrefix,
  isObjectKey,
  ObjectNotFoundError,
  StorageUnavailableError,
  type ByteSpan,
  type ObjectInfo,
  type ObjectStore,
  type StagedObject,
} from "./object-store.ts";
import { openStagingDir } from "./staging-dir.ts";

/** Where the objects go and how to reach the store; what is not set comes from the AWS SDK's defaults. */
export interface S3StorageConfig {
  readonly bucket: string;
  /** Prepended to every key: "" or segments ending with "/". */
  readonly prefix: string;
  /** `https://host:port` of an S3-compatible store; AWS's endpoint for the region when undefined. */
  readonly endpoint: string | undefined;
  readonly region: string;
  /** Path-style URLs (`endpoint/bucket/key`), which most self-hosted stores need. */
  readonly forcePathStyle: boolean;
  /** Static credentials; undefined: the SDK's default chain (profiles, web identity, instance roles). */
  readonly credentials:
    | { readonly accessKeyId: string; readonly secretAccessKey: string; readonly sessionToken?: string }
    | undefined;
}

/** Multipart part size: S3's minimum is 5 MiB (except the last part). */
const PART_BYTES = 8 * 1024 * 1024;
/** How long `check` waits for the store. */
const CHECK_TIMEOUT_MS = 10_000;

/**
 * Objects in an S3-compatible store, under `s3://<bucket>/<prefix>`. Uploads stream through
 * `@aws-sdk/lib-storage`'s Upload: a body smaller than one part is a single PutObject, a larger one
 * a multipart upload. Either way S3 makes the object visible only when the PutObject or the
 * CompleteMultipartUpload succeeds, whole; a discarded upload is aborted (AbortMultipartUpload),
 * and the parts of one whose process died stay invisible until the bucket's lifecycle rule
 * (AbortIncompleteMultipartUpload) removes them. Reads are ranged GetObjects, streamed.
 *
 * The scratch directory for dataset conversions stays on local disk (`<data dir>/.staging`).
 */
export class S3ObjectStore implements ObjectStore {
  readonly scratchDir: string;
  readonly #client: S3Client;
  readonly #config: S3StorageConfig;

  constructor(config: S3StorageConfig, scratchDir: string) {
    this.#config = config;
    this.scratchDir = openStagingDir(scratchDir);
    this.#client = new S3Client({
      region: config.region,
      forcePathStyle: config.forcePathStyle,
      ...(config.endpoint !== undefined ? { endpoint: config.endpoint } : {}),
      ...(config.credentials !== undefined ? { credentials: config.credentials } : {}),
      // Checksums only where S3 requires them: many S3-compatible stores do not take the
      // aws-chunked trailing checksums the SDK would otherwise send with every streamed upload.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
    });
  }

  get location(): string {
    return `s3://${this.#config.bucket}/${this.#config.prefix}`;
  }

  stage(key: string): Promise<StagedObject> {
    // In an executor, so that a bad key rejects as it does in the other methods.
    return new Promise((resolve) => {
      const body = new PassThrough();
      resolve(new S3StagedObject(this.#upload(key, body), body));
    });
  }

  async put(key: string, bytes: Uint8Array): Promise<void> {
    await this.#client.send(
      new PutObjectCommand({
        Bucket: this.#config.bucket,
        Key: this.#objectKey(key),
        Body: bytes,
        ContentLength: bytes.byteLength,
      }),
    );
  }

  async putFile(key: string, path: string): Promise<void> {
    const body = createReadStream(path);
    try {
      await this.#upload(key, body).done();
    } finally {
      body.destroy();
    }
    await rm(path, { force: true });
  }

  async head(key: string): Promise<ObjectInfo | null> {
    try {
      const head = await this.#client.send(
        new HeadObjectCommand({ Bucket: this.#config.bucket, Key: this.#objectKey(key) }),
      );
      return { key, size: head.ContentLength ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return null;
      throw error;
    }
  }

  async read(key: string, range?: ByteSpan): Promise<ReadableStream<Uint8Array>> {
    if (range !== undefined && range.end < range.start)
      return new ReadableStream({
        start(controller) {
          controller.close();
        },
      });
    try {
      const object = await this.#client.send(
        new GetObjectCommand({
          Bucket: this.#config.bucket,
          Key: this.#objectKey(key),
          ...(range !== undefined ? { Range: `bytes=${range.start}-${range.end}` } : {}),
        }),
      );
      // A server may ignore Range and send the whole object (s3rver does for `bytes=0-0`): the
      // stream then skips to the start, and it never runs past the end either way.
      const from = range !== undefined && object.ContentRange === undefined ? range.start : 0;
      const length = range !== undefined ? range.end - range.start + 1 : Number.POSITIVE_INFINITY;
      return pullStream(object.Body as Readable, from, length);
    } catch (error) {
      if (isNotFound(error)) throw new ObjectNotFoundError(key);
      throw error;
    }
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    assertObjectPrefix(prefix);
    const objects: ObjectInfo[] = [];
    let token: string | undefined;
    do {
      const page = await this.#client.send(
        new ListObjectsV2Command({
          Bucket: this.#config.bucket,
          Prefix: this.#config.prefix + prefix,
          ...(token !== undefined ? { ContinuationToken: token } : {}),
        }),
      );
      for (const object of page.Contents ?? []) {
        const key = object.Key?.slice(this.#config.prefix.length);
        if (key !== undefined && isObjectKey(key)) objects.push({ key, size: object.Size ?? 0 });
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    return objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async remove(key: string): Promise<void> {
    await this.#client.send(
      new DeleteObjectCommand({ Bucket: this.#config.bucket, Key: this.#objectKey(key) }),
    );
  }

  async check(): Promise<void> {
    const where = `${this.location} (endpoint ${this.#config.endpoint ?? `AWS ${this.#config.region}`})`;
    try {
      await this.#client.send(new HeadBucketCommand({ Bucket: this.#config.bucket }), {
        abortSignal: AbortSignal.timeout(CHECK_TIMEOUT_MS),
      });
    } catch (error) {
      const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      const reason =
        status === 404
          ? "the bucket does not exist"
          : status === 403
            ? "access denied: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            : `${(error as Error).name}: ${(error as Error).message}`;
      throw new StorageUnavailableError(`object storage ${where} is not usable: ${reason}`);
    }
  }

  #upload(key: string, body: Readable): Upload {
    return new Upload({
      client: this.#client,
      params: { Bucket: this.#config.bucket, Key: this.#objectKey(key), Body: body },
      partSize: PART_BYTES,
      queueSize: 2,
      leavePartsOnError: false,
    });
  }

  #objectKey(key: string): string {
    assertObjectKey(key);
    return this.#config.prefix + key;
  }
}

class S3StagedObject implements StagedObject {
  readonly #upload: Upload;
  readonly #body: PassThrough;
  readonly #done: Promise<void>;
  #failure: Error | undefined;
  #settled = false;

  constructor(upload: Upload, body: PassThrough) {
    this.#upload = upload;
    this.#body = body;
    this.#done = upload.done().then(
      () => {
        this.#settled = true;
      },
      (error: unknown) => {
        this.#settled = true;
        this.#failure = error instanceof Error ? error : new Error(`the upload failed: ${String(error)}`);
      },
    );
  }

  async write(chunk: Uint8Array): Promise<void> {
    this.#throwIfFailed();
    if (this.#body.write(chunk)) return;
    // Either the uploader takes more, or the upload failed and never will.
    await Promise.race([once(this.#body, "drain"), this.#done]);
    this.#throwIfFailed();
  }

  async commit(): Promise<void> {
    this.#body.end();
    await this.#done;
    this.#throwIfFailed();
  }

  async discard(): Promise<void> {
    if (this.#settled) return;
    // Destroyed, not ended: an ended body would be put as it is.
    this.#body.destroy(new Error("the upload was discarded"));
    await this.#upload.abort();
    await this.#done;
  }

  #throwIfFailed(): void {
    if (this.#failure !== undefined) throw this.#failure;
  }
}

/**
 * Bytes `skip…skip + length − 1` of a Node stream as a web stream read on demand, one chunk per
 * pull; the body is destroyed at the end and on cancel.
 */
function pullStream(body: Readable, skip: number, length: number): ReadableStream<Uint8Array> {
  const chunks = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  let toSkip = skip;
  let left = length;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          for (;;) {
            const next = left > 0 ? await chunks.next() : { done: true as const, value: undefined };
            if (next.done === true) {
              body.destroy();
              controller.close();
              return;
            }
            let chunk = new Uint8Array(next.value.buffer, next.value.byteOffset, next.value.byteLength);
            if (toSkip > 0) {
              const skipped = Math.min(toSkip, chunk.byteLength);
              toSkip -= skipped;
              chunk = chunk.subarray(skipped);
            }
            if (chunk.byteLength === 0) continue;
            if (chunk.byteLength > left) chunk = chunk.subarray(0, left);
            left -= chunk.byteLength;
            controller.enqueue(chunk);
            return;
          }
        } catch (error) {
          controller.error(error);
        }
      },
      cancel() {
        body.destroy();
      },
    },
    { highWaterMark: 1 },
  );
}

function isNotFound(error: unknown): boolean {
  const name = (error as { name?: string }).name;
  const status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  return name === "NoSuchKey" || name === "NotFound" || (status === 404 && name !== "NoSuchBucket");
}
