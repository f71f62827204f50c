/**
 * The Web Worker behind "Contribute from this browser": the volunteer's node, the same run as the
 * CLI peer's (`runVolunteer`), on the browser's runtime (IndexedDB, the browser's TF.js backends,
 * WebSockets), joined with the page's signed-in session. scripts/build-programs.ts bundles it for
 * the browser and the platform serves it with the Content-Security-Policy it needs
 * (GET /api/v1/tab/{file}). The page talks to it in `PageMessage`s and hears `WorkerMessage`s.
 */
import { pino } from "pino";
import { runVolunteer, VolunteerControls, type PeerStatus, type Reporter } from "@barnraise/volunteer";
import { browserRuntime } from "@barnraise/volunteer/browser";
import type { PageMessage, TabStatus, WorkerMessage } from "./tab-messages.ts";

/** At most one status message per this many milliseconds: the trainer reports every minibatch. */
const STATUS_EVERY_MS = 250;
/** The browser's one identity for every experiment it contributes to (one tab at a time, see the page). */
const NODE_STORE = "tab";

/** The worker's global scope, typed by hand: the web app compiles with the DOM's types, not a worker's. */
const scope = globalThis as unknown as {
  postMessage(message: WorkerMessage): void;
  addEventListener(type: "message", listener: (event: { data: PageMessage }) => void): void;
};

const post = (message: WorkerMessage) => {
  scope.postMessage(message);
};

let controls: VolunteerControls | undefined;
const stop = new AbortController();
const abort = new AbortController();

scope.addEventListener("message", ({ data }) => {
  switch (data.type) {
    case "start":
      if (controls === undefined) start(data);
      break;
    case "pause":
      controls?.pause();
      break;
    case "resume":
      controls?.resume();
      break;
    case "duty-cycle":
      controls?.setDutyCycle(data.share);
      break;
    case "leave":
      stop.abort();
      break;
  }
});

function start(order: Extract<PageMessage, { type: "start" }>): void {
  controls = new VolunteerControls({ paused: order.paused, dutyCycle: order.dutyCycle });
  runVolunteer({
    server: new URL(order.server),
    credential: { kind: "session", experimentId: order.experimentId },
    runtime: browserRuntime({ name: NODE_STORE, wasmBase: order.wasmBase }),
    backend: "auto",
    // A tab cannot be dialed: it reaches the others (directly over WebSockets, or through the aux's
    // relay) and sends and receives its parts without reducing one.
    mode: "client",
    listen: [],
    peers: [],
    reporter: tabReporter(),
    stopSignal: stop.signal,
    abortSignal: abort.signal,
    startedAt: order.clickedAt,
    controls,
  }).then(
    (result) => {
      post({ type: "ended", reason: result.train.reason === "max-steps" ? "done" : "left" });
    },
    (error: unknown) => {
      post({
        type: "ended",
        reason: "failed",
        error: error instanceof Error ? error.message : String(error),
      });
    },
  );
}

/** The run's reports as messages to the page: its status (throttled), its log lines, and the events the page shows. */
function tabReporter(): Reporter {
  let lastStatusAt = 0;
  let pending: ReturnType<typeof setTimeout> | undefined;
  let latest: PeerStatus | undefined;
  const flush = () => {
    pending = undefined;
    lastStatusAt = Date.now();
    if (latest !== undefined) post({ type: "status", status: tabStatus(latest) });
  };
  return {
    // The engine's own records: warnings and errors reach the page's log.
    logger: pino({
      level: "warn",
      browser: {
        asObject: true,
        write: (record) => {
          const { level, msg, err } = record as {
            level?: number;
            msg?: unknown;
            err?: { message?: unknown };
          };
          if (typeof msg !== "string") return;
          const why = typeof err?.message === "string" ? ` (${err.message})` : "";
          post({ type: "log", level: (level ?? 40) >= 50 ? "error" : "warn", message: msg + why });
        },
      },
    }),
    status(status) {
      latest = status;
      if (pending !== undefined) return;
      pending = setTimeout(flush, Math.max(0, lastStatusAt + STATUS_EVERY_MS - Date.now()));
    },
    log(level, message, fields = {}) {
      post({ type: "log", level, message });
      if (typeof fields.peerId === "string" && message.includes("identity")) {
        post({ type: "joined", peerId: fields.peerId });
      }
      if (message.startsWith("backend: ")) post({ type: "backend", description: message.slice(9) });
      if (typeof fields.secondsSinceStart === "number") {
        post({ type: "first-sample", secondsSinceStart: fields.secondsSinceStart });
      }
      if (typeof fields.stateDigest === "string" && typeof fields.step === "number") {
        post({
          type: "step",
          step: {
            step: fields.step,
            groupSize: Number(fields.groupSize),
            shared: fields.shared === true,
            localSamples: Number(fields.localSamples),
            bytesSent: typeof fields.bytesSent === "number" ? fields.bytesSent : undefined,
            stateDigest: fields.stateDigest,
          },
        });
      }
    },
    close() {
      if (pending !== undefined) clearTimeout(pending);
    },
  };
}

function tabStatus(status: PeerStatus): TabStatus {
  return {
    phase: status.phase,
    step: status.step,
    globalSamples: status.globalSamples,
    targetBatchSize: status.targetBatchSize,
    localSamplesPerSecond: status.localSamplesPerSecond,
    samplesContributed: status.samplesContributed,
    peersOnline: status.peersOnline,
    loss: status.loss,
    ...(status.network === undefined
      ? {}
      : {
          network: {
            mode: status.network.mode,
            direct: status.network.direct,
            relayed: status.network.relayed,
          },
        }),
    ...(status.swarmNote === undefined ? {} : { swarmNote: status.swarmNote }),
  };
}
