import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test, type BrowserContext, type TestInfo } from "@playwright/test";
import { ProcessSet } from "./processes.ts";

/** What a story with real processes shares between its hooks and its test. */
export interface ProcessStory {
  readonly processes: ProcessSet;
  /** Browser contexts the story opened; closed at the end. */
  readonly contexts: BrowserContext[];
  /** The story's scratch directory (identities, data), made before the test and removed after. */
  readonly workDir: () => string;
}

/**
 * Registers the hooks every story with real processes needs: a scratch directory named after
 * `name`; on a failed test, every process's output attached to the report (and what `onFailure`
 * adds); at the end, the processes stopped (SIGINT, SIGKILL after 10 s), the contexts closed,
 * `cleanup` run and the directory removed (`beforeStop` runs first). Call it at the top of a spec file.
 */
export function processStory(
  name: string,
  hooks: {
    readonly onFailure?: (info: TestInfo) => Promise<void>;
    /** Runs before the processes are stopped, e.g. to end a network namespace and all it runs. */
    readonly beforeStop?: () => Promise<void>;
    readonly cleanup?: () => Promise<void>;
  } = {},
): ProcessStory {
  const processes = new ProcessSet();
  const contexts: BrowserContext[] = [];
  let workDir = "";
  test.beforeAll(async () => {
    workDir = await mkdtemp(join(tmpdir(), `barnraise-${name}-`));
  });
  test.afterEach(async () => {
    const info = test.info();
    if (info.status === info.expectedStatus) return;
    await processes.attachLogs(info);
    await hooks.onFailure?.(info);
  });
  test.afterAll(async () => {
    await hooks.beforeStop?.();
    await processes.stopAll(10_000);
    await Promise.all(contexts.map((context) => context.close()));
    await hooks.cleanup?.();
    if (workDir !== "") await rm(workDir, { recursive: true, force: true });
  });
  return { processes, contexts, workDir: () => workDir };
}
