/**
 * The Web Worker behind "Contribute from this browser": the volunteer's node, the same run as the
 * CLI peer's (`runVolunteer`), on the browser's runtime (IndexedDB, the browser's TF.js backends,
 * WebSockets), joined with the page's signed-in session. scripts/build-programs.ts bundles it for
 * the browser and the platform serves it with the Content-Security-Policy it needs
 * (GET /api/v1/tab/{file}). The page talks to it in `PageMessage`s and hears `WorkerMessage`s.
 */
import { pino } from "pino";
import { runVolunteer, VolunteerControls, type PeerStatus, type Reporter } from "@barnraise/volunteer";
import {
  browserRuntime,
  forgetBrowserNode,
  installWorkerRtc,
  needsNewIdentity,
  tabFailure,
} from "@barnraise/volunteer/browser";
import {
  TAB_HOLDS,
  type PageMessage,
  type TabHold,
  type TabStatus,
  type WorkerMessage,
} from "./tab-messages.ts";
import { TAB_CACHE } from "./tab-storage.ts";

// WebRTC through the page (browsers give workers none): the tab then reaches full nodes over
// WebRTC-direct, from any page, HTTPS ones included.
installWorkerRtc();

/** At most one status message per this many milliseconds: the trainer reports every minibatch. */
const STATUS_EVERY_MS = 250;

/** The worker's global scope, typed by hand: the web app compiles with the DOM's types, not a worker's. */
const scope = globalThis as unknown as {
  postMessage(message: WorkerMessage): void;
  addEventListener(type: "message", listener: (event: { data: PageMessage }) => void): void;
};

const post = (message: WorkerMessage) => {
  scope.postMessage(message);
};

let controls: VolunteerControls | undefined;

/** Holds training for exactly the page's `reasons`. */
function hold(held: VolunteerControls, reasons: readonly TabHold[]): void {
  for (const reason of TAB_HOLDS) held.set(reason, reasons.includes(reason));
}
/** The page's "Stop contributing" (or its closing): the round in flight finishes, then the node leaves. */
const stop = new AbortController();

scope.addEventListener("message", ({ data }) => {
  switch (data.type) {
    case "start":
      if (controls === undefined) {
        controls = new VolunteerControls({ dutyCycle: data.dutyCycle });
        hold(controls, data.held);
        void contribute(data, controls).then(post);
      }
      break;
    case "hold":
      if (controls !== undefined) hold(controls, data.reasons);
      break;
    case "duty-cycle":
      controls?.setDutyCycle(data.share);
      break;
    case "leave":
      stop.abort();
      break;
  }
});

/**
 * Runs the volunteer's node until it leaves, and says how it ended. Each user has a key of their own
 * for each experiment in this browser; when the platform refuses that key itself (the node was
 * revoked or retired under My nodes), the tab forgets it and joins once more as a new node.
 */
async function contribute(
  order: Extract<PageMessage, { type: "start" }>,
  controls: VolunteerControls,
): Promise<WorkerMessage> {
  const identity = `tab-${order.userId}-${order.experimentId}`;
  for (let attempt = 1; ; attempt++) {
    // Set from the reporter's callback: the platform admitted this attempt's key.
    const attemptOf = { joined: false };
    try {
      const result = await runVolunteer({
        server: new URL(order.server),
        credential: { kind: "session", experimentId: order.experimentId },
        runtime: browserRuntime({ identity, cache: TAB_CACHE, wasmBase: order.wasmBase }),
        backend: "auto",
        // A tab cannot be dialed: it reaches the others (directly over WebSockets, or through the
        // aux's relay) and sends and receives its parts without reducing one.
        mode: "client",
        listen: [],
        peers: [],
        reporter: tabReporter(() => {
          attemptOf.joined = true;
        }),
        stopSignal: stop.signal,
        // No hard stop from inside: the page ends the worker itself (terminate) when it must.
        abortSignal: new AbortController().signal,
        startedAt: order.clickedAt,
        controls,
      });
      return { type: "ended", reason: result.train.reason === "max-steps" ? "done" : "left" };
    } catch (error) {
      // Told to leave while starting: whatever the start-up threw on its way out, the tab left.
      if (stop.signal.aborted) return { type: "ended", reason: "left" };
      if (!attemptOf.joined && attempt === 1 && needsNewIdentity(error)) {
        post({
          type: "log",
          level: "warn",
          message:
            "The platform no longer takes this browser's earlier key (retired, revoked, or another account's): joining as a new node…",
        });
        await forgetBrowserNode(identity);
        continue;
      }
      return { type: "ended", reason: "failed", error: tabFailure(error) };
    }
  }
}

/**
 * The run's reports as messages to the page: its status (throttled), its log lines, and its
 * milestones (`onJoined` hears the platform's admission first).
 */
function tabReporter(onJoined: () => void): Reporter {
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
    log(level, message) {
      post({ type: "log", level, message });
    },
    event(event) {
      switch (event.type) {
        case "joined":
          onJoined();
          post({ type: "joined", peerId: event.peerId });
          break;
        case "backend":
          post({ type: "backend", description: event.description });
          break;
        case "first-sample":
          post({ type: "first-sample", secondsSinceStart: event.secondsSinceStart });
          break;
        case "step":
          post({ type: "step", step: event.step });
          break;
      }
    },
    close() {
      if (pending !== undefined) clearTimeout(pending);
      pending = undefined;
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
            webrtc: status.network.webrtc ?? 0,
          },
        }),
    ...(status.swarmNote === undefined ? {} : { swarmNote: status.swarmNote }),
  };
}
