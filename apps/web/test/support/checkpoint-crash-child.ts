/**
 * A platform process that starts a checkpoint upload and stalls halfway, for checkpoint-crash.test.ts,
 * which SIGKILLs it there. It runs the real upload route on the parent's database and data dir
 * (DATABASE_URL, BARNRAISE_DATA_DIR and the secrets come from the environment; the upload from
 * CRASH_UPLOAD). Once the first half of the file is in the staging area it prints
 * `STAGED <staging file name>` and waits to be killed.
 */
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { fromBase64Url, keyPairFromSecretKey, signRequest } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { POST } from "../../app/api/v1/experiments/[id]/checkpoints/route.ts";
import { createAppContext, installAppContext } from "../../src/server/context.ts";
import { loadServerEnv } from "../../src/server/env.ts";

interface CrashUpload {
  experimentId: string;
  /** The aux node's 64-byte secret key, base64url. */
  secretKey: string;
  pass: string;
  authorityPublicKey: string;
  sizeBytes: number;
}

const init = JSON.parse(process.env.CRASH_UPLOAD ?? "") as CrashUpload;
const env = loadServerEnv(process.env);
const ctx = createAppContext(env);
installAppContext(ctx);

const file = new Uint8Array(init.sizeBytes).map((_, i) => (i * 31) % 251);
const half = Math.floor(file.length / 2);
const path = `/api/v1/experiments/${init.experimentId}/checkpoints?step=7&sizeBytes=${file.length}`;
const authorization = signRequest(nodeCrypto, keyPairFromSecretKey(fromBase64Url(init.secretKey, "key")), {
  pass: init.pass,
  recipientPublicKey: fromBase64Url(init.authorityPublicKey, "authority key"),
  scope: `POST ${path}`,
  body: { sha256: nodeCrypto.sha256(file) },
  time: Date.now(),
});

const stagingDir = join(env.dataDir, ".staging");

/** The staging file once it holds `bytes` bytes. */
async function stagedFile(bytes: number): Promise<string> {
  for (;;) {
    for (const name of await readdir(stagingDir)) {
      if ((await stat(join(stagingDir, name))).size >= bytes) return name;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

let pulls = 0;
const body = new ReadableStream<Uint8Array>({
  async pull(controller) {
    pulls += 1;
    if (pulls === 1) {
      controller.enqueue(file.slice(0, half));
      return;
    }
    process.stdout.write(`STAGED ${await stagedFile(half)}\n`);
    // The rest never comes: the process stays alive until it is killed here.
    setInterval(() => undefined, 60_000);
    await new Promise(() => undefined);
  },
});

const response = await POST(
  new Request(new URL(path, "http://localhost:3000"), {
    method: "POST",
    headers: { "content-type": "application/octet-stream", authorization: `Barnraise ${authorization}` },
    body,
    duplex: "half",
  } as RequestInit),
  { params: Promise.resolve({ id: init.experimentId }) },
);
// Reaching this line means the upload finished, which the test does not expect.
process.stdout.write(`FINISHED ${response.status}\n`);
