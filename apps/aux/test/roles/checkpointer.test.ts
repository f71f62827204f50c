import { createHash } from "node:crypto";
import { access, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serializeTrainingState, type TrainingState } from "@barnraise/swarm";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  Checkpointer,
  type CheckpointerOptions,
  type CheckpointerPorts,
} from "../../src/roles/checkpointer.ts";

const EVERY = 4;
const RETRY_MS = 5_000;

let root: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "barnraise-checkpointer-"));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function stateAt(epoch: number): TrainingState {
  return {
    epoch,
    parameters: Float32Array.from([0.5, -1.25, 3, epoch]),
    optimizer: {
      name: "adam",
      step: epoch,
      slots: { m: Float32Array.from([0.1, 0.2, 0.3, 0.4]), v: Float32Array.from([1, 2, 3, 4]) },
    },
  };
}

interface Upload {
  path: string;
  sizeBytes: number;
  sha256: Uint8Array;
  /** The staged file as it was while the upload ran. */
  bytes: Uint8Array;
  meta: { step: number; loss?: number };
}

/** A checkpointer on a fake clock, with ports that record their calls; each may be replaced. */
function setup(ports: Partial<CheckpointerPorts> = {}, options: Partial<CheckpointerOptions> = {}) {
  const clock = { now: 1_700_000_000_000 };
  const logger = pino({ level: "silent" });
  const warn = vi.spyOn(logger, "warn");
  const directory = join(root, "staging");
  const downloads: number[] = [];
  const uploads: Upload[] = [];
  const checkpointer = new Checkpointer({
    everySteps: EVERY,
    directory,
    logger,
    retryDelayMs: RETRY_MS,
    now: () => clock.now,
    downloadState: (minEpoch) => {
      downloads.push(minEpoch);
      return Promise.resolve(stateAt(minEpoch));
    },
    upload: async (file, meta) => {
      const bytes = new Uint8Array(await readFile(file.path));
      uploads.push({ ...file, bytes, meta });
      return { id: `checkpoint-${uploads.length}`, sha256: Buffer.from(file.sha256).toString("hex") };
    },
    ...ports,
    ...options,
  });
  const staged = () => readdir(directory).catch(() => []);
  return { checkpointer, clock, warn, directory, downloads, uploads, staged };
}

const signal = new AbortController().signal;

describe("Checkpointer", () => {
  it("refuses an everySteps that is not a positive integer", () => {
    for (const everySteps of [0, -1, 1.5, Number.NaN]) {
      expect(() => setup({}, { everySteps })).toThrow(RangeError);
    }
  });

  it("is not due before everySteps steps and does nothing then", async () => {
    const { checkpointer, downloads, uploads } = setup();
    for (let step = 0; step < EVERY; step++) {
      expect(checkpointer.due(step)).toBe(false);
      await checkpointer.maybeCheckpoint(step, 1, signal);
    }
    expect(downloads).toEqual([]);
    expect(uploads).toEqual([]);
    expect(checkpointer.lastStep).toBe(0);
    expect(checkpointer.due(EVERY)).toBe(true);
  });

  it("checkpoints the run's last step whatever everySteps says, and nothing after it", async () => {
    const { checkpointer, downloads, uploads } = setup({}, { finalStep: 2 * EVERY + 1 });
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    await checkpointer.maybeCheckpoint(2 * EVERY, 1, signal);
    // One step after the last regular checkpoint: the run's end, not everySteps later.
    expect(checkpointer.due(2 * EVERY + 1)).toBe(true);
    await checkpointer.maybeCheckpoint(2 * EVERY + 1, 1, signal);
    expect(downloads).toEqual([EVERY, 2 * EVERY, 2 * EVERY + 1]);
    expect(uploads.map((upload) => upload.meta.step)).toEqual([EVERY, 2 * EVERY, 2 * EVERY + 1]);
    expect(checkpointer.due(2 * EVERY + 1)).toBe(false);
  });

  it("checkpoints a last step that comes before everySteps", async () => {
    const { checkpointer, uploads } = setup({}, { finalStep: EVERY - 1 });
    expect(checkpointer.due(EVERY - 2)).toBe(false);
    await checkpointer.maybeCheckpoint(EVERY - 1, 1, signal);
    expect(uploads.map((upload) => upload.meta.step)).toEqual([EVERY - 1]);
  });

  it("uploads the serialized state with its SHA-256, the state's epoch and the loss, then removes the file", async () => {
    // The trainers are already one step further than the step the checkpoint was due at.
    const asked: number[] = [];
    const { checkpointer, uploads, directory, staged, warn } = setup({
      downloadState: (minEpoch) => {
        asked.push(minEpoch);
        return Promise.resolve(stateAt(minEpoch + 1));
      },
    });
    await checkpointer.maybeCheckpoint(EVERY, 0.75, signal);

    expect(asked).toEqual([EVERY]);
    expect(uploads).toHaveLength(1);
    const [upload] = uploads;
    if (upload === undefined) throw new Error("no upload");
    const expected = serializeTrainingState(stateAt(EVERY + 1));
    expect(upload.bytes).toEqual(expected);
    expect(upload.sizeBytes).toBe(expected.byteLength);
    expect(Buffer.from(upload.sha256).toString("hex")).toBe(
      createHash("sha256").update(upload.bytes).digest("hex"),
    );
    expect(upload.meta).toStrictEqual({ step: EVERY + 1, generation: 0, loss: 0.75 });
    expect(upload.path.startsWith(directory)).toBe(true);
    await expect(access(upload.path)).rejects.toThrow();
    expect(await staged()).toEqual([]);
    expect(checkpointer.lastStep).toBe(EVERY + 1);
    expect(warn).not.toHaveBeenCalled();
  });

  it("tells onUploaded the uploaded state and the platform's record of it, for the held-out evaluation", async () => {
    const told: { epoch: number; id: string }[] = [];
    const { checkpointer } = setup(
      {},
      {
        onUploaded: (state, checkpoint) => {
          told.push({ epoch: state.epoch, id: checkpoint.id });
        },
      },
    );
    await checkpointer.maybeCheckpoint(EVERY, 0.5, signal);
    expect(told).toEqual([{ epoch: EVERY, id: "checkpoint-1" }]);
  });

  it("leaves the loss out of the meta when there is none", async () => {
    const { checkpointer, uploads } = setup();
    await checkpointer.maybeCheckpoint(EVERY, undefined, signal);
    expect(uploads.map((upload) => upload.meta)).toStrictEqual([{ step: EVERY, generation: 0 }]);
  });

  it("after a failed download logs it, keeps lastStep and tries again only after the retry delay", async () => {
    let failures = 1;
    const failure = new Error("no trainer has the state");
    const { checkpointer, clock, warn, downloads, uploads } = setup({
      downloadState: (minEpoch) => {
        downloads.push(minEpoch);
        if (failures-- > 0) return Promise.reject(failure);
        return Promise.resolve(stateAt(minEpoch));
      },
    });
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn).toHaveBeenCalledWith(
      expect.objectContaining({ step: EVERY, err: failure }),
      expect.stringContaining("failed"),
    );
    expect(checkpointer.lastStep).toBe(0);
    expect(uploads).toEqual([]);

    clock.now += RETRY_MS - 1;
    expect(checkpointer.due(EVERY + 1)).toBe(false);
    await checkpointer.maybeCheckpoint(EVERY + 1, 1, signal);
    expect(downloads).toEqual([EVERY]);

    clock.now += 1;
    expect(checkpointer.due(EVERY + 1)).toBe(true);
    await checkpointer.maybeCheckpoint(EVERY + 1, 1, signal);
    expect(downloads).toEqual([EVERY, EVERY + 1]);
    expect(uploads.map((upload) => upload.meta.step)).toEqual([EVERY + 1]);
    expect(checkpointer.lastStep).toBe(EVERY + 1);
  });

  it("after a failed upload logs it, removes the staged file, keeps lastStep and waits the retry delay", async () => {
    const failure = new Error("platform unavailable");
    const seen: string[] = [];
    const { checkpointer, clock, warn, downloads, staged } = setup({
      upload: async (file) => {
        await access(file.path);
        seen.push(file.path);
        throw failure;
      },
    });
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(seen).toHaveLength(1);
    expect(await staged()).toEqual([]);
    expect(warn).toHaveBeenCalledWith(
      expect.objectContaining({ step: EVERY, err: failure }),
      expect.any(String),
    );
    expect(checkpointer.lastStep).toBe(0);

    clock.now += RETRY_MS - 1;
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(downloads).toEqual([EVERY]);
    clock.now += 1;
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(downloads).toEqual([EVERY, EVERY]);
    expect(await staged()).toEqual([]);
  });

  it("counts the next checkpoint from the epoch actually uploaded, which may be later than the step asked for", async () => {
    const { checkpointer, uploads } = setup({
      downloadState: (minEpoch) => Promise.resolve(stateAt(minEpoch + 2)),
    });
    await checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(uploads.map((upload) => upload.meta.step)).toEqual([EVERY + 2]);
    expect(checkpointer.lastStep).toBe(EVERY + 2);

    expect(checkpointer.due(2 * EVERY)).toBe(false);
    expect(checkpointer.due(2 * EVERY + 1)).toBe(false);
    expect(checkpointer.due(2 * EVERY + 2)).toBe(true);
  });

  it("takes one checkpoint at a time: a call while one is in flight does nothing", async () => {
    const pending = Promise.withResolvers<TrainingState>();
    const downloads: number[] = [];
    const { checkpointer, uploads } = setup({
      downloadState: (minEpoch) => {
        downloads.push(minEpoch);
        return pending.promise;
      },
    });
    const first = checkpointer.maybeCheckpoint(EVERY, 1, signal);
    expect(checkpointer.due(EVERY + 1)).toBe(false);
    await checkpointer.maybeCheckpoint(EVERY + 1, 1, signal);
    expect(downloads).toEqual([EVERY]);

    pending.resolve(stateAt(EVERY));
    await first;
    expect(downloads).toEqual([EVERY]);
    expect(uploads.map((upload) => upload.meta.step)).toEqual([EVERY]);
  });

  it("rejects on abort without logging a failure or delaying the next attempt", async () => {
    const controller = new AbortController();
    const { checkpointer, warn, staged } = setup({
      downloadState: (_minEpoch, abort) =>
        new Promise<TrainingState>((_resolve, reject) => {
          abort.addEventListener(
            "abort",
            () => {
              reject(abort.reason as Error);
            },
            { once: true },
          );
        }),
    });
    const run = checkpointer.maybeCheckpoint(EVERY, 1, controller.signal);
    controller.abort(new Error("stopping"));
    await expect(run).rejects.toThrow("stopping");
    expect(warn).not.toHaveBeenCalled();
    expect(checkpointer.lastStep).toBe(0);
    expect(checkpointer.due(EVERY)).toBe(true);
    expect(await staged()).toEqual([]);
  });

  it("rejects when the signal aborts during the upload and removes the staged file", async () => {
    const controller = new AbortController();
    const { checkpointer, staged } = setup({
      upload: () => {
        controller.abort(new Error("stopping"));
        return Promise.reject(new Error("upload cancelled"));
      },
    });
    await expect(checkpointer.maybeCheckpoint(EVERY, 1, controller.signal)).rejects.toThrow(
      "upload cancelled",
    );
    expect(await staged()).toEqual([]);
    expect(checkpointer.lastStep).toBe(0);
  });
});
