import { freemem } from "node:os";
import { join } from "node:path";
import type { ExperimentConfig, KeyPair, RunControl } from "@barnraise/protocol";
import {
  abortableSleep,
  CollaborativeOptimizer,
  fetchRunControl,
  joinPlatform,
  JoinError,
  JoinErrorCode,
  latestCheckpointStep,
  loadLatestCheckpoint,
  loadRollbackCheckpoint,
  PlatformClient,
  Swarm,
  type AveragerPort,
  type AveragingMode,
  type JoinedExperiment,
  joinAsNode,
  openNodeSession,
} from "@barnraise/swarm";
import {
  type BackendChoice,
  CachedDatasetSource,
  createBatchStream,
  deriveSeed,
  describeBackend,
  ensureBackendTrains,
  evaluateModel,
  type Evaluation,
  hashName,
  HttpDatasetSource,
  loadModel,
  resolveBatchSize,
  selectPeerBackend,
  type TrainableModel,
} from "@barnraise/models";
import { waitForFinalCheckpoint } from "./training/final-checkpoint.ts";
import { LossReportingProgress } from "./training/loss-reporting-progress.ts";
import { followSwarmContact, type SwarmContact } from "./training/follow-swarm-contact.ts";
import { Trainer, type TrainResult } from "./training/trainer.ts";
import { logOptimizerEvents } from "./ui/optimizer-events.ts";
import type { Reporter } from "./ui/peer-status.ts";

export interface PeerRunOptions {
  readonly server: URL;
  readonly token: string;
  readonly identityPath: string;
  /** Verified shards are cached here, per dataset, and uploaded models under `models/`. */
  readonly dataDir: string;
  readonly backend: BackendChoice;
  /** Overrides the experiment's `training.localBatchSize`. */
  readonly batchSize?: number | "auto" | undefined;
  /** "node" accepts connections and reduces; "client" only dials out (behind NAT). */
  readonly mode: Extract<AveragingMode, "node" | "client">;
  /** Listen multiaddrs; the swarm's default when empty. */
  readonly listen: readonly string[];
  /** Multiaddrs of peers to join through, besides the platform's initial peers. */
  readonly peers: readonly string[];
  readonly reporter: Reporter;
  /** Graceful stop (first Ctrl-C): finish the round in flight, then leave. */
  readonly stopSignal: AbortSignal;
  /** Hard stop (second Ctrl-C): abandon everything. */
  readonly abortSignal: AbortSignal;
  /** Process start, for the time-to-first-sample figure; default: when runPeer is called. */
  readonly startedAt?: number;
  /** Serve Prometheus metrics at http://host:port/metrics (`--metrics-port`, `--metrics-host`). */
  readonly metrics?: { readonly port: number; readonly host: string };
  readonly now?: () => number;
  /**
   * For tests of the swarm's defences only (the CLI never sets it): wraps the port through which
   * the optimizer averages, so a test's attacker peer can tamper with what it contributes (scale
   * or flip its gradients) while everything else runs as a volunteer's peer does.
   */
  readonly wrapAverager?: (port: AveragerPort) => AveragerPort;
}

export interface PeerRunResult {
  readonly experiment: JoinedExperiment["experiment"];
  readonly train: TrainResult;
  readonly evaluation?: Evaluation | undefined;
}

/** How often a peer measures its link against an aux peer, and how soon after a failure. */
const LINK_PROBE_EVERY_MS = 10 * 60_000;
const LINK_PROBE_RETRY_MS = 30_000;
/** How long a peer waits for the run control before its first minibatch. */
const FIRST_CONTROL_MS = 5_000;
/** A peer that hears of no other trainer steps alone only once it has been in the swarm this long. */
const ALONE_AFTER_MS = 10_000;
/** How long a joining peer waits to hear from the swarm before it trains on its own. */
const DISCOVERY_TIMEOUT_MS = 15_000;
/** While alone, ask the platform for the aux peers' addresses after this long, doubling up to the next. */
const FIRST_REDISCOVERY_MS = 2_000;
const MAX_REDISCOVERY_MS = 20_000;
/** Share of free memory the automatic batch size may fill with activations. */
const ACTIVATION_MEMORY_SHARE = 0.25;
/** …and never more than this: the wasm backend's heap is a 32-bit address space shared with the weights. */
const MAX_ACTIVATION_BYTES = 1 << 30;

/**
 * The volunteer's whole run (DESIGN §1): identity → join (pass and config verified, authority
 * pinned) → backend → model (an uploaded one downloaded and verified) → data → swarm → training
 * until the run's last step or a stop. Throws JoinError, BackendUnavailableError, IdentityFileError,
 * DatasetError, ModelError … for the CLI to turn into messages and exit codes; cleans up the swarm
 * and the model whatever happens.
 */
export async function runPeer(options: PeerRunOptions): Promise<PeerRunResult> {
  const { reporter, abortSignal } = options;
  const now = options.now ?? Date.now;
  const startedAt = options.startedAt ?? now();
  // Until training starts, a stop (first Ctrl-C) cancels whatever is waiting: the join's retries,
  // the model and manifest downloads, the wait for the swarm.
  const startUp = AbortSignal.any([options.stopSignal, abortSignal]);
  const node = await joinAsNode({
    server: options.server,
    token: options.token,
    identityPath: options.identityPath,
    role: "trainer",
    log: (level, message, fields) => {
      reporter.log(level, message, fields);
    },
    signal: startUp,
  });
  const { identity, joined } = node;
  const { config } = joined;
  reporter.log("info", `joined experiment "${joined.experiment.name}"`, {
    experimentId: joined.experiment.id,
    model: config.model.preset,
    targetBatchSize: config.training.targetBatchSize,
    strategy: config.averaging.strategy,
    compression: config.compression.method,
    passExpiresAt: new Date(joined.passExpiresAt).toISOString(),
  });

  const { selected, benchmark } = await selectPeerBackend(options.backend, {
    server: options.server,
    directory: join(options.dataDir, "addons"),
    signal: startUp,
    log: (line) => {
      reporter.log("info", line);
    },
  });
  reporter.log("info", describeBackend(selected, benchmark));

  const model = await loadModel(config.model, {
    server: options.server,
    dataDir: options.dataDir,
    signal: startUp,
    log: (line) => {
      reporter.log("info", line);
    },
    warn: (message, error) => {
      reporter.log("warn", message, { err: error });
    },
  });
  const cleanups: (() => Promise<void> | void)[] = [
    () => {
      model.dispose();
    },
  ];
  try {
    // An uploaded model may need a gradient kernel the chosen backend lacks (presets never do).
    if (model.uploaded !== undefined) {
      await ensureBackendTrains(model, config.model, (message) => {
        reporter.log("warn", message);
      });
    }
    const batchSize = await chooseBatchSize(options, config, model);
    const source = new CachedDatasetSource(
      new HttpDatasetSource({ serverUrl: options.server.href, dataset: config.dataset.name }),
      join(options.dataDir, config.dataset.name),
      (message, error) => {
        reporter.log("warn", message, error === undefined ? {} : { err: error });
      },
    );
    const manifest = await source.manifest(startUp);
    const dataSeed = hashName(identity.peerId);
    const batches = createBatchStream({
      source,
      split: "train",
      batchSize,
      seed: dataSeed,
      config,
      manifest,
      uploaded: model.uploaded,
      signal: abortSignal,
    });
    cleanups.push(async () => {
      await batches.return();
    });

    // The swarm serves the optimizer's state to new peers; the optimizer needs the swarm's ports.
    const served: { optimizer?: CollaborativeOptimizer } = {};
    const session = await openNodeSession(node, {
      mode: options.mode,
      listen: options.listen,
      peers: options.peers,
      logger: reporter.logger,
      metrics: options.metrics,
      swarm: (platform) => ({
        // Peers starting together hear of each other before any of them steps alone.
        aloneAfterMs: ALONE_AFTER_MS,
        getState: () => served.optimizer?.exportState() ?? null,
        // No live donor ahead of us: the run's latest checkpoint, vouched for by the platform.
        loadCheckpoint: async (minEpoch, generation, signal) => {
          const latest = await loadLatestCheckpoint(platform, signal);
          if (latest === null || latest.attestation.generation !== generation) return null;
          if (latest.state.epoch < minEpoch) return null;
          reporter.log(
            "info",
            `loading the run's checkpoint of step ${latest.state.epoch} from the platform`,
            {
              step: latest.state.epoch,
              sha256: latest.attestation.sha256,
            },
          );
          return latest.state;
        },
      }),
      onRefreshed: (refreshed) => {
        if (refreshed.configVersion !== joined.configVersion) {
          reporter.log("warn", "the organizer changed the experiment's config; restart the peer to use it", {
            configVersion: refreshed.configVersion,
          });
        }
      },
    });
    cleanups.push(() => session.close());
    const { swarm, platform } = session;
    if (options.mode === "node") {
      reporter.log("info", "listening", { peerId: swarm.peerId, addresses: swarm.node.multiaddrs() });
    }

    const progress = new LossReportingProgress(swarm.progress);
    const optimizer = new CollaborativeOptimizer({
      config,
      layout: model.layout,
      // Every peer starts from the same bits: the seed is the experiment's.
      parameters: model.initialParameters(hashName(joined.experiment.id)),
      progress,
      averager: options.wrapAverager?.(swarm.averagerPort()) ?? swarm.averagerPort(),
      state: swarm.statePort(),
      // Checkpoints record which config the state was trained with.
      configVersion: joined.configVersion,
    });
    served.optimizer = optimizer;
    // Say hello to the swarm at once: a peer that waits to hear from others before training would
    // otherwise wait out the whole discovery time when everyone has just started.
    progress.report({ epoch: optimizer.epoch, samplesAccumulated: 0, samplesPerSecond: 0 });
    // A peer that found nobody (it started before the organizer's aux peer registered, or was
    // handed the address of an aux that has since restarted elsewhere) asks the platform again for
    // the aux peers' addresses while it is alone: within seconds at first, then less often. So does
    // a peer in a swarm that lost touch with every aux peer the platform lists (an aux restarted on
    // another port): the aux keeps the run's state, its metrics and its checkpoints.
    const lookingForPeers = new AbortController();
    let auxListed = joined.initialPeers.length > 0;
    void lookForPeers(
      () => {
        const members = swarm.node.members();
        return (
          members.length > 0 && (!auxListed || members.some((peer) => swarm.node.modeOf(peer) === "aux"))
        );
      },
      async () => {
        const listed = await rediscover(swarm, options, identity.keyPair, joined, reporter);
        if (listed !== undefined) auxListed = listed > 0;
      },
      AbortSignal.any([lookingForPeers.signal, abortSignal]),
    );
    cleanups.push(() => {
      lookingForPeers.abort();
    });
    // The link's capacity, which sets this peer's share of each all-reduce: a speed test against an
    // aux peer now and every 10 minutes; the all-reduce's own traffic refines it in between.
    void measureLinkNow(swarm, reporter, AbortSignal.any([lookingForPeers.signal, abortSignal]));
    if (joined.initialPeers.length + options.peers.length > 0) {
      const heard = await waitForSwarm(swarm, options.stopSignal, abortSignal);
      if (!heard && !options.stopSignal.aborted) {
        reporter.log(
          "warn",
          `no peer answered within ${DISCOVERY_TIMEOUT_MS / 1000} s; training on our own until one does`,
        );
      }
    }

    const testBatches = () =>
      createBatchStream({
        source,
        split: "test",
        batchSize: 1000,
        seed: dataSeed,
        config,
        manifest,
        uploaded: model.uploaded,
        signal: abortSignal,
      });
    /** The peer's contact with the swarm, set once the trainer exists (see below). */
    const contact: { current?: SwarmContact } = {};
    const trainer = new Trainer({
      model,
      optimizer,
      progress,
      batches,
      swarm: {
        global: () => swarm.progress.global(),
        peersOnline: () => swarm.progress.snapshot().alivePeers,
        connectivity: () => swarm.node.connectivity(),
        note: () => contact.current?.note(),
      },
      seed: deriveSeed(dataSeed, 1),
      maxSteps: config.training.maxSteps,
      onStatus: (status) => {
        reporter.status(status);
        swarm.metrics.step.set(status.step);
        swarm.metrics.samplesPerSecond.set(status.localSamplesPerSecond);
        swarm.metrics.peersOnline.set(status.peersOnline);
      },
      onEvent: logOptimizerEvents(reporter),
      onFirstContribution: (samples) => {
        reporter.log("info", "first minibatch contributed", {
          samples,
          secondsSinceStart: Number(((now() - startedAt) / 1000).toFixed(2)),
        });
      },
    });
    // Refused by the swarm, or stepping alone for minutes while others train: say so, and hold.
    contact.current = followSwarmContact({
      swarm,
      platform,
      optimizer,
      trainer,
      reporter,
      auxListed: () => auxListed,
      signal: AbortSignal.any([lookingForPeers.signal, abortSignal]),
    });
    const stopContact = contact.current;
    cleanups.push(() => {
      stopContact.stop();
    });
    // Ctrl-C or a refused pass refresh: finish the round in flight, then leave.
    const stopping = AbortSignal.any([options.stopSignal, session.leaving]);
    const stopOnSignal = () => {
      trainer.stop();
    };
    // The organizer's run control (pause, bans, rollback), from the platform and from other nodes.
    const followControl = followRunControl({
      swarm,
      platform,
      optimizer,
      trainer,
      reporter,
      username: joined.pass.username,
      leave: session.refuse,
    });
    cleanups.push(followControl.stop);
    // A node that joins a paused run (it was in the swarm before, so the platform lets it refresh)
    // waits from its first minibatch: the run control is read once before training starts.
    try {
      swarm.control.offer(
        await fetchRunControl(
          platform,
          AbortSignal.any([abortSignal, AbortSignal.timeout(FIRST_CONTROL_MS)]),
        ),
        "platform",
      );
    } catch (error) {
      reporter.logger.debug({ err: error }, "could not read the run control before training");
    }
    void session.followRunControl(AbortSignal.any([followControl.signal, abortSignal]));
    if (stopping.aborted) trainer.stop();
    stopping.addEventListener("abort", stopOnSignal, { once: true });
    let train: TrainResult;
    try {
      train = await trainer.run(abortSignal);
    } finally {
      stopping.removeEventListener("abort", stopOnSignal);
    }
    if (session.refused !== undefined) throw session.refused;
    reporter.log(
      "info",
      train.reason === "max-steps" ? "the run reached its last step" : "stopped training",
      {
        step: train.step,
        samplesContributed: train.samplesContributed,
        minibatches: train.minibatches,
      },
    );

    let evaluation: Evaluation | undefined;
    // A finished run ends with the model's score on the held-out split.
    if (train.reason === "max-steps") {
      evaluation = await evaluateModel(model, optimizer.parameters, testBatches(), abortSignal);
      reporter.log("info", "evaluated on the test split", { step: train.step, ...evaluation });
      // Still in the swarm: the aux can download the last step's state from this peer.
      await waitForFinalCheckpoint({
        step: train.step,
        latestStep: (signal) => latestCheckpointStep(platform, signal),
        auxPresent: () => swarm.node.members().some((peer) => swarm.node.modeOf(peer) === "aux"),
        log: (level, message, fields) => {
          reporter.log(level, message, fields);
        },
        signal: AbortSignal.any([stopping, abortSignal]),
      });
    }
    return { experiment: joined.experiment, train, evaluation };
  } finally {
    for (const cleanup of cleanups.reverse()) {
      try {
        await cleanup();
      } catch (error) {
        reporter.log("warn", "cleanup failed", { err: error });
      }
    }
  }
}

interface RunControlFollowerOptions {
  readonly swarm: Swarm;
  readonly platform: PlatformClient;
  readonly optimizer: CollaborativeOptimizer;
  readonly trainer: Trainer;
  readonly reporter: Reporter;
  readonly username: string;
  readonly leave: (error: JoinError) => void;
}

/**
 * Obeys the newest run control the swarm's board holds: pause and resume the trainer, leave when
 * this node's user is revoked, and on a rollback load the named checkpoint (checked against the
 * control's SHA-256) and continue from its step.
 */
function followRunControl(options: RunControlFollowerOptions): { stop: () => void; signal: AbortSignal } {
  const { swarm, platform, optimizer, trainer, reporter } = options;
  const stopped = new AbortController();
  let rollingBack: number | undefined;
  const apply = (control: RunControl) => {
    if (control.revokedUsernames.includes(options.username)) {
      options.leave(
        new JoinError(
          JoinErrorCode.BANNED,
          "the organizer banned this node's user or removed it from the allowlist",
        ),
      );
      return;
    }
    if (control.status === "paused" && !trainer.paused) {
      reporter.log("warn", "the organizer paused the run; waiting");
      trainer.pause();
    } else if (control.status === "running" && trainer.paused) {
      reporter.log("info", "the organizer resumed the run");
      trainer.resume();
    }
    const target = control.rollback;
    if (target === null || control.generation <= optimizer.generation || rollingBack === control.generation)
      return;
    rollingBack = control.generation;
    loadRollbackCheckpoint(platform, target, control.generation, stopped.signal).then(
      (state) => {
        if (control.generation <= optimizer.generation) return;
        optimizer.importState({ ...state, generation: control.generation });
        reporter.log("warn", `the organizer rolled the run back to step ${target.step}`, {
          step: target.step,
          generation: control.generation,
        });
      },
      (error: unknown) => {
        rollingBack = undefined;
        if (!stopped.signal.aborted) {
          reporter.log("warn", "could not load the rollback checkpoint; trying again", { err: error });
        }
      },
    );
  };
  const unsubscribe = swarm.control.on("change", apply);
  const again = () => {
    const current = swarm.control.current();
    if (current !== null) apply(current);
  };
  again();
  // Also looked at now and then: a rollback whose checkpoint failed to load is tried again.
  const timer = setInterval(again, 5_000);
  timer.unref();
  return {
    signal: stopped.signal,
    stop: () => {
      clearInterval(timer);
      stopped.abort();
      unsubscribe();
    },
  };
}

async function chooseBatchSize(
  options: PeerRunOptions,
  config: ExperimentConfig,
  model: TrainableModel,
): Promise<number> {
  const requested = options.batchSize ?? config.training.localBatchSize;
  const choice = await resolveBatchSize({
    requested,
    targetBatchSize: config.training.targetBatchSize,
    model,
    memoryBytes: Math.min(freemem() * ACTIVATION_MEMORY_SHARE, MAX_ACTIVATION_BYTES),
  });
  options.reporter.log("info", `local batch size ${choice.batchSize}`, {
    requested,
    ...(choice.samplesPerSecond === undefined
      ? {}
      : { measuredSamplesPerSecond: Math.round(choice.samplesPerSecond) }),
    ...(choice.limitedBy === undefined ? {} : { limitedBy: choice.limitedBy }),
  });
  return choice.batchSize;
}

/**
 * Joins again (one attempt) for the current initial peers and dials them; failures are only logged.
 * Resolves with how many the platform listed, or undefined when it could not be asked.
 */
async function rediscover(
  swarm: Swarm,
  options: PeerRunOptions,
  keyPair: KeyPair,
  joined: JoinedExperiment,
  reporter: Reporter,
): Promise<number | undefined> {
  try {
    const fresh = await joinPlatform({
      server: options.server,
      token: options.token,
      keyPair,
      experimentId: joined.experiment.id,
      pinnedAuthority: swarm.node.authority.publicKey,
    });
    swarm.node.authority.followJoin(fresh);
    const results = await Promise.allSettled(
      fresh.initialPeers.map((address) => swarm.node.connect(address)),
    );
    const reached = results.filter((result) => result.status === "fulfilled").length;
    if (reached > 0) reporter.log("info", `found the swarm through ${reached} aux peer(s)`);
    return fresh.initialPeers.length;
  } catch (error) {
    reporter.log("warn", "could not ask the platform for peers", { err: error });
    return undefined;
  }
}

/**
 * Calls `rediscover` while `connected()` is false: 2 s after the start or after losing the last
 * member, then at doubling intervals up to 20 s. Ends when `signal` aborts.
 */
async function lookForPeers(
  connected: () => boolean,
  rediscover: () => Promise<void>,
  signal: AbortSignal,
): Promise<void> {
  let delayMs = FIRST_REDISCOVERY_MS;
  while (!signal.aborted) {
    try {
      await abortableSleep(connected() ? FIRST_REDISCOVERY_MS : delayMs, signal);
    } catch {
      return;
    }
    if (connected()) {
      delayMs = FIRST_REDISCOVERY_MS;
      continue;
    }
    await rediscover();
    delayMs = Math.min(delayMs * 2, MAX_REDISCOVERY_MS);
  }
}

/**
 * Measures the link against an aux member (the first one connected, waiting for one), logs the
 * result, and does it again every LINK_PROBE_EVERY_MS; a failed probe is tried again after
 * LINK_PROBE_RETRY_MS. Ends when `signal` aborts.
 */
async function measureLinkNow(swarm: Swarm, reporter: Reporter, signal: AbortSignal): Promise<void> {
  for (;;) {
    const aux = swarm.node.members().find((peer) => swarm.node.modeOf(peer) === "aux");
    let waitMs = LINK_PROBE_RETRY_MS;
    if (aux !== undefined) {
      try {
        const link = await swarm.measureLink(aux, signal);
        reporter.log(
          "info",
          `link: ${formatMbit(link.uploadBytesPerSecond)} up, ${formatMbit(link.downloadBytesPerSecond)} down (a speed test against an aux peer)`,
          { ...link, aux },
        );
        waitMs = LINK_PROBE_EVERY_MS;
      } catch (error) {
        if (signal.aborted) return;
        reporter.logger.debug({ err: error, aux }, "the link speed test failed; trying again");
      }
    }
    try {
      await abortableSleep(aux === undefined ? FIRST_REDISCOVERY_MS : waitMs, signal);
    } catch {
      return;
    }
  }
}

/** A link rate as volunteers read it, e.g. "9.4 Mbit/s". */
export function formatMbit(bytesPerSecond: number): string {
  return `${((bytesPerSecond * 8) / 1e6).toFixed(1)} Mbit/s`;
}

/**
 * Waits until some peer's progress arrives (so the first step can load the swarm's state instead
 * of starting from scratch) or DISCOVERY_TIMEOUT_MS passes.
 */
async function waitForSwarm(swarm: Swarm, stop: AbortSignal, abort: AbortSignal): Promise<boolean> {
  const deadline = Date.now() + DISCOVERY_TIMEOUT_MS;
  while (swarm.progress.records().length === 0) {
    if (Date.now() >= deadline || stop.aborted) return false;
    await abortableSleep(100, abort);
  }
  return true;
}
