import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";

/**
 * An S3-compatible server on 127.0.0.1 (s3rver: the S3 REST API, signature V4 checked, on a temp
 * directory), with one empty bucket. `env` is what the platform needs to use it.
 */
export interface TestS3Server {
  readonly endpoint: string;
  readonly bucket: string;
  /** The platform's storage variables for `s3://<bucket>/<prefix>` on this server. */
  env(prefix?: string): Record<string, string>;
  close(): Promise<void>;
}

/** s3rver's fixed credentials. */
const ACCESS_KEY = "S3RVER";

export async function startS3Server(bucket = "barnraise-test"): Promise<TestS3Server> {
  const directory = await mkdtemp(join(tmpdir(), "barnraise-s3-"));
  const server = new S3rver({
    address: "127.0.0.1",
    port: 0,
    silent: true,
    directory,
    configureBuckets: [{ name: bucket }],
  });
  const address = await server.run();
  const endpoint = `http://127.0.0.1:${address.port}`;
  return {
    endpoint,
    bucket,
    env: (prefix = "") => ({
      BARNRAISE_STORAGE_URL: `s3://${bucket}/${prefix}`,
      BARNRAISE_S3_FORCE_PATH_STYLE: "1",
      AWS_ENDPOINT_URL_S3: endpoint,
      AWS_REGION: "us-east-1",
      AWS_ACCESS_KEY_ID: ACCESS_KEY,
      AWS_SECRET_ACCESS_KEY: ACCESS_KEY,
    }),
    async close() {
      await server.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}
