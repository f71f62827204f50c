import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { stallAwareSignal, stallAwareTimeout } from "../../src/time/stall-aware-timeout.ts";

/**
 * A peer on another thread (as if on another machine) that connects to `port` and, when told,
 * writes one chunk and raises a shared flag once the bytes are in the kernel's hands.
 */
const PEER = `
const { workerData, parentPort } = require("node:worker_threads");
const { connect } = require("node:net");
const flag = new Int32Array(workerData.flag);
const socket = connect(workerData.port, "127.0.0.1");
parentPort.on("message", () => {
  socket.write("chunk", () => {
    Atomics.store(flag, 0, 1);
  });
});
`;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A socket to a peer thread, and a way to make the peer send while this thread is blocked. */
async function remotePeer(): Promise<{ socket: Socket; sendWhileBlocked: (blockMs: number) => void }> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const flag = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(PEER, {
    eval: true,
    workerData: { port: (server.address() as AddressInfo).port, flag: flag.buffer },
  });
  const [socket] = (await once(server, "connection")) as [Socket];
  cleanups.push(async () => {
    socket.destroy();
    await worker.terminate();
    server.close();
  });
  return {
    socket,
    sendWhileBlocked(blockMs) {
      const start = performance.now();
      worker.postMessage("send");
      // This thread is busy (a training step, a saturated core) until the chunk has arrived.
      while (Atomics.load(flag, 0) === 0 || performance.now() - start < blockMs) {
        // spin
      }
    },
  };
}

/** What happens first after a stall: the chunk that arrived during it is read, or the deadline fires. */
async function firstAfterStall(
  deadline: (callback: () => void, ms: number) => { clear(): void },
): Promise<string[]> {
  const { socket, sendWhileBlocked } = await remotePeer();
  const events: string[] = [];
  const settled = Promise.withResolvers<null>();
  const record = (event: string) => {
    events.push(event);
    if (events.length === 2) settled.resolve(null);
  };
  socket.once("data", () => {
    record("chunk read");
  });
  const timer = deadline(() => {
    record("deadline");
  }, 100);
  cleanups.push(() => {
    timer.clear();
    return Promise.resolve();
  });
  sendWhileBlocked(500);
  await settled.promise;
  return events;
}

describe("stallAwareTimeout", () => {
  it("lets a chunk that arrived while this process was blocked be read before the deadline fires", async () => {
    // A plain timer fires first: Node runs due timers before it reads the sockets.
    const plain = await firstAfterStall((callback, ms) => {
      const timer = setTimeout(callback, ms);
      return {
        clear: () => {
          clearTimeout(timer);
        },
      };
    });
    expect(plain).toEqual(["deadline", "chunk read"]);
    expect(await firstAfterStall(stallAwareTimeout)).toEqual(["chunk read", "deadline"]);
  });

  it("fires when nothing stalls, and never after clear", async () => {
    const fired = Promise.withResolvers<string>();
    stallAwareTimeout(() => {
      fired.resolve("fired");
    }, 20);
    expect(await fired.promise).toBe("fired");

    let cleared = false;
    const timer = stallAwareTimeout(() => {
      cleared = true;
    }, 10);
    timer.clear();
    timer.clear();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(cleared).toBe(false);
  });

  it("gives a signal that aborts with a TimeoutError, as AbortSignal.timeout does", async () => {
    const signal = stallAwareSignal(10);
    expect(signal.aborted).toBe(false);
    await new Promise((resolve) => {
      signal.addEventListener("abort", resolve, { once: true });
    });
    expect(signal.reason).toBeInstanceOf(DOMException);
    expect((signal.reason as DOMException).name).toBe("TimeoutError");
  });

  it("does not keep the process alive while a signal is pending, as AbortSignal.timeout does not", async () => {
    const module = new URL("../../src/time/stall-aware-timeout.ts", import.meta.url).href;
    // A pending signal of ten minutes: the child ends as soon as it has nothing else to do.
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { stallAwareSignal } from ${JSON.stringify(module)}; stallAwareSignal(600_000);`,
      ],
      { stdio: "inherit" },
    );
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(0);
  });
});
