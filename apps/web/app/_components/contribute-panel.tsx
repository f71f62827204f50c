"use client";

import { hostWorkerRtc } from "@barnraise/volunteer/tab-page";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import type { PageMessage, TabHold, TabStatus, TabStep, WorkerMessage } from "../../src/tab/tab-messages.ts";
import { formatBytes, formatCount } from "./format.ts";

/** One contributing tab per browser: the others see it is taken and say so. */
const CONTRIBUTE_LOCK = "barnraise-contribute";
/** The use limits a volunteer can pick, as shares of the time the tab computes. */
const DUTY_CYCLES = [1, 0.75, 0.5, 0.25] as const;
/** Log lines the panel keeps. */
const LOG_LINES = 6;

export interface ContributePanelProps {
  readonly experimentId: string;
  /** The signed-in user: the tab keeps a key of its own for each user and experiment. */
  readonly userId: string;
  /** The worker's script on this platform (GET /api/v1/tab/{file}). */
  readonly workerUrl: string;
  /** Where the wasm backend's binaries are served, ending in "/". */
  readonly wasmBase: string;
}

type Stage = "idle" | "starting" | "running" | "leaving" | "ended";

interface Running {
  readonly worker: Worker;
  readonly releaseLock: () => void;
  /** Closes the WebRTC connections the page holds for the worker. */
  readonly stopRtc: () => void;
}

/**
 * "Contribute from this browser": one click, and this tab trains the run in a Web Worker as a
 * volunteer's node, joined with the signed-in session (no token to copy). The panel shows what the
 * tab does (its speed, the swarm's progress, its contribution, the backend it measured) and lets the
 * volunteer pause, pause while the tab is hidden (on by default), limit how much of the time it
 * computes, and leave (the round in flight finishes first). Closing the tab ends the worker; the
 * others drop it at once.
 */
export function ContributePanel({ experimentId, userId, workerUrl, wasmBase }: ContributePanelProps) {
  const [stage, setStage] = useState<Stage>("idle");
  const [status, setStatus] = useState<TabStatus | null>(null);
  const [lastStep, setLastStep] = useState<TabStep | null>(null);
  const [backend, setBackend] = useState<string | null>(null);
  const [peerId, setPeerId] = useState<string | null>(null);
  const [firstSampleSeconds, setFirstSampleSeconds] = useState<number | null>(null);
  const [bytesSent, setBytesSent] = useState(0);
  const [log, setLog] = useState<readonly string[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [userPaused, setUserPaused] = useState(false);
  const [pauseWhenHidden, setPauseWhenHidden] = useState(true);
  const [hidden, setHidden] = useState(false);
  const [dutyCycle, setDutyCycle] = useState<number>(1);
  const running = useRef<Running | null>(null);
  /** The start in progress (waiting for the lock), until its worker runs: a leave or unmount cancels it. */
  const starting = useRef<{ cancelled: boolean } | null>(null);
  const paused = userPaused || (pauseWhenHidden && hidden);
  // Why it is paused, as My nodes says it ("by you", "this tab is hidden").
  const held = useMemo(
    (): readonly TabHold[] => [
      ...(userPaused ? (["volunteer"] as const) : []),
      ...(pauseWhenHidden && hidden ? (["hidden"] as const) : []),
    ],
    [userPaused, pauseWhenHidden, hidden],
  );
  // What the worker starts with, read when it starts (the volunteer may change both meanwhile).
  const controls = useRef({ held, dutyCycle });
  controls.current = { held, dutyCycle };

  const send = useCallback((message: PageMessage) => {
    running.current?.worker.postMessage(message);
  }, []);

  const end = useCallback(() => {
    running.current?.worker.terminate();
    running.current?.stopRtc();
    running.current?.releaseLock();
    running.current = null;
  }, []);

  const onMessage = useCallback(
    (message: WorkerMessage) => {
      switch (message.type) {
        case "status":
          setStatus(message.status);
          setStage((stage) => (stage === "starting" ? "running" : stage));
          break;
        case "log":
          setLog((lines) => [...lines, message.message].slice(-LOG_LINES));
          break;
        case "joined":
          setPeerId(message.peerId);
          break;
        case "backend":
          setBackend(message.description);
          break;
        case "first-sample":
          setFirstSampleSeconds(message.secondsSinceStart);
          break;
        case "step":
          setLastStep(message.step);
          setBytesSent((total) => total + (message.step.bytesSent ?? 0));
          break;
        case "ended":
          if (message.reason === "failed") setError(message.error ?? "the tab's node stopped");
          setStage("ended");
          end();
          break;
      }
    },
    [end],
  );

  async function contribute() {
    const clickedAt = Date.now();
    // A new run of the tab's node: nothing of the last one's figures.
    setError(null);
    setStatus(null);
    setLastStep(null);
    setBackend(null);
    setPeerId(null);
    setFirstSampleSeconds(null);
    setBytesSent(0);
    setLog([]);
    setStage("starting");
    const start = { cancelled: false };
    starting.current = start;
    const releaseLock = await holdContributeLock();
    if (start.cancelled) {
      // Left (or the page went away) while waiting for the lock: nothing starts.
      releaseLock?.();
      return;
    }
    starting.current = null;
    if (releaseLock === null) {
      setError("Another tab of this browser is already contributing. Close it, or contribute from there.");
      setStage("idle");
      return;
    }
    const worker = new Worker(workerUrl, { type: "module", name: "barnraise-volunteer" });
    // The page holds the worker's WebRTC connections (browsers give workers none).
    const stopRtc = hostWorkerRtc(worker);
    running.current = { worker, releaseLock, stopRtc };
    worker.addEventListener("message", (event: MessageEvent<WorkerMessage>) => {
      onMessage(event.data);
    });
    worker.addEventListener("error", (event) => {
      setError(`the tab's node failed: ${event.message || "its script did not load"}`);
      setStage("ended");
      end();
    });
    send({
      type: "start",
      server: window.location.origin,
      experimentId,
      userId,
      wasmBase: new URL(wasmBase, window.location.origin).href,
      held: controls.current.held,
      dutyCycle: controls.current.dutyCycle,
      clickedAt,
    });
  }

  function leave() {
    if (starting.current !== null) {
      starting.current.cancelled = true;
      starting.current = null;
      setStage("ended");
      return;
    }
    setStage("leaving");
    send({ type: "leave" });
  }

  // Pause while hidden: follow the page's visibility.
  useEffect(() => {
    const follow = () => {
      setHidden(document.visibilityState === "hidden");
    };
    follow();
    document.addEventListener("visibilitychange", follow);
    return () => {
      document.removeEventListener("visibilitychange", follow);
    };
  }, []);

  useEffect(() => {
    send({ type: "hold", reasons: held });
  }, [held, send]);

  useEffect(() => {
    send({ type: "duty-cycle", share: dutyCycle });
  }, [dutyCycle, send]);

  // Leaving the page: ask the node to go (it may not get the time), and never leave a worker behind.
  useEffect(() => {
    const onPageHide = () => {
      send({ type: "leave" });
    };
    window.addEventListener("pagehide", onPageHide);
    return () => {
      window.removeEventListener("pagehide", onPageHide);
      if (starting.current !== null) starting.current.cancelled = true;
      end();
    };
  }, [send, end]);

  /** What the tab's node does, as its own status says (a pause shows once the node holds). */
  function stateText(): string {
    if (stage === "starting" && status === null) return "joining…";
    if (stage === "leaving") return "leaving after the round in flight…";
    if (paused) {
      const why = userPaused ? "paused by you" : "paused while this tab is hidden";
      return status?.phase === "paused" ? why : `${why}: finishing the minibatch in flight…`;
    }
    return status?.phase ?? "joining…";
  }

  const active = stage === "starting" || stage === "running" || stage === "leaving";
  return (
    <section aria-labelledby="contribute-heading" className="card stack" data-testid="contribute-panel">
      <h2 id="contribute-heading" className="card-title">
        Contribute from this browser
      </h2>
      {active ? null : (
        <>
          <p>
            Train this run in this tab, with nothing to install: the tab joins the swarm as your node and
            computes on your GPU or CPU while the page stays open.
          </p>
          <div className="actions">
            <button type="button" className="button" onClick={() => void contribute()}>
              {stage === "ended" ? "Contribute again" : "Contribute from this browser"}
            </button>
          </div>
        </>
      )}
      {active ? (
        <>
          <dl className="facts">
            <Fact label="State" testId="tab-phase">
              {stateText()}
            </Fact>
            <Fact label="Backend" testId="tab-backend">
              {backend ?? "measuring…"}
            </Fact>
            <Fact label="This tab" testId="tab-speed">
              {status === null ? "–" : `${formatCount(Math.round(status.localSamplesPerSecond))} samples/s`}
            </Fact>
            <Fact label="Swarm's next step" testId="tab-swarm-progress">
              {status === null
                ? "–"
                : `step ${status.step}: ${formatCount(Math.round(status.globalSamples))} of ${formatCount(status.targetBatchSize)} samples, ${status.peersOnline} peers online`}
            </Fact>
            <Fact label="Contributed" testId="tab-contributed">
              {status === null ? "0" : formatCount(status.samplesContributed)} samples
              {firstSampleSeconds === null ? "" : ` (first after ${firstSampleSeconds.toFixed(1)} s)`}
            </Fact>
            <Fact label="Last step" testId="tab-last-step">
              {lastStep === null ? (
                "none yet"
              ) : (
                <>
                  step <span data-testid="tab-step">{lastStep.step}</span> with{" "}
                  <span data-testid="tab-group-size">{lastStep.groupSize}</span> members, parameters{" "}
                  <code data-testid="tab-state-digest">{lastStep.stateDigest}</code>
                  {lastStep.bytesSent === undefined ? "" : `, ${formatBytes(lastStep.bytesSent)} sent`}
                </>
              )}
            </Fact>
            <Fact label="Sent" testId="tab-bytes-sent">
              {formatBytes(bytesSent)}
              {status?.network === undefined
                ? ""
                : ` · ${status.network.direct} direct${
                    status.network.webrtc > 0 ? ` (${status.network.webrtc} over WebRTC)` : ""
                  }, ${status.network.relayed} relayed`}
            </Fact>
          </dl>
          <div className="actions">
            <button
              type="button"
              className="button button-secondary"
              disabled={stage === "leaving"}
              onClick={() => {
                setUserPaused(!userPaused);
              }}
            >
              {userPaused ? "Resume" : "Pause"}
            </button>
            <button
              type="button"
              className="button button-secondary"
              disabled={stage === "leaving"}
              onClick={leave}
            >
              Stop contributing
            </button>
          </div>
          <label>
            <input
              type="checkbox"
              checked={pauseWhenHidden}
              onChange={(event) => {
                setPauseWhenHidden(event.target.checked);
              }}
            />{" "}
            Pause when this tab is hidden
          </label>
          <label>
            Use at most{" "}
            <select
              value={dutyCycle}
              onChange={(event) => {
                setDutyCycle(Number(event.target.value));
              }}
            >
              {DUTY_CYCLES.map((share) => (
                <option key={share} value={share}>
                  {share * 100} % of the time
                </option>
              ))}
            </select>
          </label>
          {status?.swarmNote === undefined ? null : <p className="notice notice-warn">{status.swarmNote}</p>}
          {peerId === null ? null : (
            <p className="muted">
              This browser&apos;s node: <code data-testid="tab-peer-id">{peerId}</code>. It is listed under My
              nodes, where you can retire it.
            </p>
          )}
        </>
      ) : null}
      {log.length > 0 ? (
        <pre className="muted" data-testid="tab-log">
          {log.join("\n")}
        </pre>
      ) : null}
      <p role="status" className={error === null ? "visually-hidden" : "notice notice-error"}>
        {error}
      </p>
    </section>
  );
}

function Fact({ label, testId, children }: { label: string; testId: string; children: React.ReactNode }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd data-testid={testId}>{children}</dd>
    </div>
  );
}

/**
 * Holds this browser's contribute lock (Web Locks) until the returned release is called, or returns
 * null when another tab holds it. A page that is not a secure context (plain HTTP off localhost) has
 * no Web Locks: it contributes without the lock.
 */
function holdContributeLock(): Promise<(() => void) | null> {
  // Typed as always there, but absent outside secure contexts.
  const locks = navigator.locks as LockManager | undefined;
  if (locks === undefined) return Promise.resolve(() => undefined);
  return new Promise((resolve) => {
    locks
      .request(CONTRIBUTE_LOCK, { ifAvailable: true }, (lock) => {
        if (lock === null) {
          resolve(null);
          return undefined;
        }
        return new Promise<void>((release) => {
          resolve(() => {
            release();
          });
        });
      })
      .catch(() => {
        // Refused by the browser (a sandboxed frame, say): contribute without the lock.
        resolve(() => undefined);
      });
  });
}
