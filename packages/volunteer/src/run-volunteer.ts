import { joinAsNode } from "@barnraise/swarm";
import { Cleanups } from "./run/cleanups.ts";
import { openData } from "./run/data-phase.ts";
import { findSwarm } from "./run/find-swarm.ts";
import { finish } from "./run/finish-phase.ts";
import { prepareModel } from "./run/model-phase.ts";
import type { VolunteerOptions, VolunteerResult } from "./run/volunteer-options.ts";
import { joinSwarm } from "./run/swarm-phase.ts";
import { train } from "./run/train-phase.ts";

/**
 * The volunteer's whole run (DESIGN §1), the same in the CLI peer and in a browser tab (each gives
 * its `runtime`), one phase after the other: join (identity, pass and config
 * verified, authority pinned) → model (backend, preset or uploaded model, batch size) → data →
 * swarm (the node session and the collaborative optimizer) → train until the run's last step or a
 * stop → finish (the held-out score, the last checkpoint). Throws JoinError,
 * BackendUnavailableError, IdentityFileError, DatasetError, ModelError … for the program to turn
 * into messages (and the CLI into exit codes); cleans up the swarm and the model whatever happens.
 */
export async function runVolunteer(options: VolunteerOptions): Promise<VolunteerResult> {
  const { reporter, abortSignal } = options;
  const now = options.now ?? Date.now;
  const startedAt = options.startedAt ?? now();
  // Until training starts, a stop (first Ctrl-C) cancels whatever is waiting: the join's retries,
  // the model and manifest downloads, the wait for the swarm.
  const startUp = AbortSignal.any([options.stopSignal, abortSignal]);
  const node = await joinAsNode({
    server: options.server,
    credential: options.credential,
    store: options.runtime.nodeStore,
    role: "trainer",
    log: (level, message, fields) => {
      reporter.log(level, message, fields);
    },
    signal: startUp,
  });
  const { config, experiment } = node.joined;
  reporter.event?.({ type: "joined", peerId: node.identity.peerId, experimentId: experiment.id });
  reporter.log("info", `joined experiment "${experiment.name}"`, {
    experimentId: experiment.id,
    model: config.model.kind,
    targetBatchSize: config.training.targetBatchSize,
    strategy: config.averaging.strategy,
    compression: config.compression.method,
    passExpiresAt: new Date(node.joined.passExpiresAt).toISOString(),
  });

  const { model, batchSize } = await prepareModel(options, config, startUp);
  const cleanups = new Cleanups();
  cleanups.add(() => {
    model.dispose();
  });
  try {
    const data = await openData(options, config, model, batchSize, node.identity.peerId, startUp);
    cleanups.add(async () => {
      await data.batches.return();
    });
    const member = await joinSwarm(node, model, options);
    cleanups.add(() => member.session.close());
    const search = await findSwarm(member.session, options);
    cleanups.add(search.stop);
    const trained = await train({ options, model, data, member, search, cleanups, startedAt, now });
    const evaluation = await finish(options, trained, model, data, member);
    return { experiment, train: trained, evaluation };
  } finally {
    await cleanups.run((error) => {
      reporter.log("warn", "cleanup failed", { err: error });
    });
  }
}
