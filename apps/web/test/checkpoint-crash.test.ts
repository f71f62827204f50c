import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { toBase64Url } from "@barnraise/protocol";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { LocalObjectStore } from "../src/server/storage/local-object-store.ts";
import { storeContents } from "./support/checkpoint-upload.ts";
import { setUpAux, type AuxSetup } from "./support/peer-fixtures.ts";
import { createTestApp, TEST_AUTH_SECRET, TEST_SEALING_SECRET, type TestApp } from "./support/test-app.ts";

/**
 * A platform process killed in the middle of an upload (SIGKILL: no cleanup code runs) must leave
 * nothing half-written visible: no Checkpoint row, no file under a visible name. Its staging file
 * is swept when the store is next opened.
 */

const CHILD = join(import.meta.dirname, "support", "checkpoint-crash-child.ts");

describe.each(testDatabaseProviders())("a process killed mid-upload (%s)", (provider) => {
  let app: TestApp;
  let setup: AuxSetup;
  let child: ChildProcess | undefined;

  beforeEach(async () => {
    app = await createTestApp(provider);
    setup = await setUpAux(app);
  });
  afterEach(async () => {
    // A failed run must not leave its child behind.
    if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    child = undefined;
    await app.dispose();
  });

  it("leaves no row and no visible file, and its staging file is swept on the next start", async () => {
    const uploader = spawn(process.execPath, [CHILD], {
      env: {
        ...process.env,
        NODE_ENV: "test",
        AUTH_SECRET: TEST_AUTH_SECRET,
        BARNRAISE_SECRET: TEST_SEALING_SECRET,
        DATABASE_URL: app.ctx.env.databaseUrl,
        BARNRAISE_DATA_DIR: app.dataDir,
        LOG_LEVEL: "silent",
        CRASH_UPLOAD: JSON.stringify({
          experimentId: setup.experimentId,
          secretKey: toBase64Url(setup.aux.key.secretKey),
          pass: setup.aux.join.pass,
          authorityPublicKey: setup.aux.join.authorityPublicKey,
          sizeBytes: 4 * 1024 * 1024,
        }),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = uploader;
    const exited = once(uploader, "exit");
    let stderr = "";
    uploader.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));

    let staged: string | undefined;
    for await (const line of createInterface({ input: uploader.stdout })) {
      staged = /^STAGED (.+)$/.exec(line)?.[1];
      if (staged !== undefined) break;
    }
    expect(staged, `the child did not stage the upload: ${stderr}`).toBeDefined();
    expect(staged).toMatch(new RegExp(`^${uploader.pid}-.*\\.part$`));

    uploader.kill("SIGKILL");
    const [, signal] = (await exited) as [number | null, NodeJS.Signals | null];
    expect(signal).toBe("SIGKILL");

    expect(await app.db.checkpoint.count()).toBe(0);
    expect(await storeContents(app.dataDir)).toEqual({ visible: [], staging: [`.staging/${staged}`] });

    new LocalObjectStore(app.dataDir);
    expect(await storeContents(app.dataDir)).toEqual({ visible: [], staging: [] });
  });
});
