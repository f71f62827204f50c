import type { CheckpointView, MetricPoint } from "../../../apps/web/src/api/schemas/public.ts";
import type { ChaosRecord, IncarnationView, PeerHistory, StatusLine, StepLine } from "../types.ts";

/** Small synthetic observations for the checks' tests. Times are seconds, made Unix ms here. */

export const T0 = Date.parse("2026-01-01T00:00:00.000Z");
export const at = (seconds: number) => T0 + seconds * 1000;

export function incarnation(name: string, overrides: Partial<IncarnationView> = {}): IncarnationView {
  return {
    name,
    role: name.startsWith("peer") ? "peer" : name === "aux" ? "aux" : "platform",
    index: 0,
    logFile: `/logs/${name}.0.log`,
    startedAt: at(0),
    endedAt: at(1000),
    exit: { code: 0, signal: null },
    stop: { reason: "end of the soak", at: at(999), expectCodes: [0] },
    forced: null,
    ...overrides,
  };
}

export function step(
  seconds: number,
  n: number,
  digest: string,
  overrides: Partial<StepLine> = {},
): StepLine {
  return {
    time: at(seconds),
    step: n,
    groupSize: 3,
    samples: 4096,
    localSamples: 1000,
    shared: true,
    stateDigest: digest.padEnd(16, "0"),
    ...overrides,
  };
}

export function status(seconds: number, swarmNote: string | null = null): StatusLine {
  return { time: at(seconds), phase: "training", step: null, swarmNote };
}

export function peer(
  name: string,
  steps: readonly StepLine[],
  overrides: Partial<IncarnationView> = {},
  statuses: readonly StatusLine[] = [],
): PeerHistory {
  return { incarnation: incarnation(name, overrides), peerId: `id-${name}`, steps, statuses };
}

export function point(timeline: number, n: number, recordedSeconds: number, loss = 1 / n): MetricPoint {
  return {
    step: n,
    loss,
    samplesPerSecond: 1000,
    alivePeers: 3,
    bytesPerPeer: null,
    utilization: null,
    samples: null,
    recordedAt: new Date(at(recordedSeconds)).toISOString(),
    timeline,
    discarded: false,
  };
}

export function checkpoint(id: string, n: number, createdSeconds: number, generation = 0): CheckpointView {
  return {
    id,
    step: n,
    loss: 0.5,
    sizeBytes: 100,
    sha256: "0".repeat(64),
    generation,
    timeline: 0,
    createdAt: new Date(at(createdSeconds)).toISOString(),
    downloadUrl: `/api/v1/experiments/demo/checkpoints/${id}`,
    safetensorsUrl: `/api/v1/experiments/demo/checkpoints/${id}/safetensors`,
    tfjsUrl: null,
    evaluation: null,
  };
}

export function chaos(
  kind: ChaosRecord["kind"],
  startSeconds: number,
  overrides: Partial<ChaosRecord> = {},
): ChaosRecord {
  return {
    kind,
    target: null,
    startedAt: at(startSeconds),
    restartedAt: at(startSeconds + 5),
    doneAt: at(startSeconds + 6),
    started: [],
    notes: [],
    failure: null,
    ...overrides,
  };
}
