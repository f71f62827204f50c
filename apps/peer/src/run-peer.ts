import { freemem } from "node:os";
import { join } from "node:path";
import { directoryStore, selectPeerBackend } from "@barnraise/models/node";
import {
  fileNodeStore,
  listenable,
  loadNodeTransports,
  prometheusNodeMetrics,
  type SwarmTransports,
} from "@barnraise/swarm/node";
import {
  runVolunteer,
  type VolunteerOptions,
  type VolunteerResult,
  type VolunteerRuntime,
} from "@barnraise/volunteer";

/** Share of free memory the automatic batch size may fill with activations. */
const ACTIVATION_MEMORY_SHARE = 0.25;
/** …and never more than this: the wasm backend's heap is a 32-bit address space shared with the weights. */
const MAX_ACTIVATION_BYTES = 1 << 30;

export interface PeerRunOptions extends Omit<VolunteerOptions, "runtime"> {
  /** The identity file (`--identity`); the authority pin lives beside it. */
  readonly identityPath: string;
  /** Verified shards are cached here, per dataset, uploaded models under `models/`, the WebGPU addon under `addons/`. */
  readonly dataDir: string;
  /** Serve Prometheus metrics at http://host:port/metrics (`--metrics-port`, `--metrics-host`). */
  readonly metrics?: { readonly port: number; readonly host: string };
}

/** The volunteer's run on Node.js: `runVolunteer` with files, Node's backends and Prometheus. */
export async function runPeer(options: PeerRunOptions): Promise<VolunteerResult> {
  const { identityPath, dataDir, metrics, ...volunteer } = options;
  const networking = await loadNodeTransports();
  // A full node listens on TCP, and on WebRTC-direct for browser tabs; a client listens on nothing.
  const wanted =
    options.listen.length > 0 || options.mode === "client" ? options.listen : networking.defaultListen;
  const { usable, dropped } = listenable(networking, wanted);
  if (networking.withoutWebRtc !== undefined && options.mode !== "client") {
    options.reporter.log(
      dropped.length > 0 ? "warn" : "info",
      `no WebRTC-direct on this machine (${networking.withoutWebRtc}): browser tabs reach this node through the aux's relay`,
      dropped.length > 0 ? { notListeningOn: dropped } : {},
    );
  }
  return runVolunteer({
    ...volunteer,
    listen: usable,
    runtime: nodeRuntime(options.server, identityPath, dataDir, metrics, networking.transports),
  });
}

function nodeRuntime(
  server: URL,
  identityPath: string,
  dataDir: string,
  metrics: PeerRunOptions["metrics"],
  transports: SwarmTransports,
): VolunteerRuntime {
  return {
    transports,
    nodeStore: fileNodeStore(identityPath),
    blobStore: (name) => directoryStore(join(dataDir, name)),
    selectBackend: (choice, signal, log) =>
      selectPeerBackend(choice, { server, directory: join(dataDir, "addons"), signal, log }),
    activationMemoryBytes: () => Math.min(freemem() * ACTIVATION_MEMORY_SHARE, MAX_ACTIVATION_BYTES),
    metrics: prometheusNodeMetrics(metrics),
    cpuTimeMs: () => {
      const { user, system } = process.cpuUsage();
      return (user + system) / 1000;
    },
  };
}
