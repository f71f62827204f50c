import { parseExperimentConfig } from "@barnraise/protocol";
import type { AppContext } from "../context.ts";
import { hashPassword, verifyPassword } from "../auth/passwords.ts";
import { addToAllowlist } from "../services/add-to-allowlist.ts";
import { createExperiment } from "../services/create-experiment.ts";
import { createPeerToken } from "../services/create-peer-token.ts";
import { readExperiment, type ExperimentView } from "../services/read-experiment.ts";
import { createUserWithPassword } from "./create-user-with-password.ts";

/**
 * The demo's organizer and `mnist-mlp` experiment. Idempotent: running it again keeps what exists
 * (an existing organizer gets the given password, so the one printed by the demo always works).
 */

export interface SeedDemoInput {
  readonly organizerUsername: string;
  readonly organizerPassword: string;
  readonly experimentId: string;
}

export interface SeedDemoResult {
  readonly organizer: { readonly id: string; readonly username: string };
  readonly experiment: ExperimentView;
  readonly created: { readonly organizer: boolean; readonly experiment: boolean };
}

export const DEMO_EXPERIMENT_NAME = "MNIST digits, trained together";
export const DEMO_EXPERIMENT_DESCRIPTION =
  "A small multilayer perceptron on the MNIST handwritten digits: the quickest way to watch a swarm " +
  "train. Ask to join, create a peer token and run barnraise-peer with it.";

export async function seedDemo(ctx: AppContext, input: SeedDemoInput): Promise<SeedDemoResult> {
  const organizer = await ensureUser(ctx, input.organizerUsername, input.organizerPassword);
  const existing = await ctx.db.experiment.findUnique({ where: { id: input.experimentId } });
  if (existing !== null) {
    if (existing.organizerId !== organizer.user.id) {
      ctx.logger.warn(
        { experimentId: input.experimentId, organizer: input.organizerUsername },
        "the demo experiment exists with another organizer; left as it is",
      );
    }
    return {
      organizer: organizer.user,
      experiment: await readExperiment(ctx, input.experimentId),
      created: { organizer: organizer.created, experiment: false },
    };
  }
  const experiment = await createExperiment(ctx, organizer.user, {
    id: input.experimentId,
    name: DEMO_EXPERIMENT_NAME,
    description: DEMO_EXPERIMENT_DESCRIPTION,
    config: parseExperimentConfig({
      model: { kind: "mnist-mlp", hiddenUnits: [128, 64] },
      // Steps of a second or so with two local peers; a checkpoint about every minute.
      training: { targetBatchSize: 4096 },
      checkpoints: { everySteps: 50 },
      optimizer: { name: "adam", learningRate: 1e-3 },
    }),
  });
  return {
    organizer: organizer.user,
    experiment,
    created: { organizer: organizer.created, experiment: true },
  };
}

/** The label of the tokens the demo makes; each run revokes the previous run's. */
export const DEMO_TOKEN_LABEL = "demo";

export interface DemoSwarmTokens {
  /** The organizer's aux token, for the demo's aux peer. */
  readonly auxToken: string;
  /** The demo volunteer's peer token, for the demo's two peers. */
  readonly peerToken: string;
}

/**
 * What the demo's local swarm needs: a volunteer on the allowlist, an aux token of the organizer and
 * a peer token of the volunteer. Tokens are kept hashed, so each run makes new ones and revokes the
 * ones an earlier run made (by their label), leaving tokens made by people alone.
 */
export async function seedDemoSwarm(
  ctx: AppContext,
  input: { organizerUsername: string; volunteerUsername: string; password: string; experimentId: string },
): Promise<DemoSwarmTokens> {
  const organizer = await ensureUser(ctx, input.organizerUsername, input.password);
  const volunteer = await ensureUser(ctx, input.volunteerUsername, input.password);
  await addToAllowlist(ctx, organizer.user, input.experimentId, { username: volunteer.user.username });
  await ctx.db.peerToken.updateMany({
    where: {
      experimentId: input.experimentId,
      userId: { in: [organizer.user.id, volunteer.user.id] },
      label: DEMO_TOKEN_LABEL,
      revokedAt: null,
    },
    data: { revokedAt: new Date(ctx.now()) },
  });
  const aux = await createPeerToken(ctx, organizer.user, input.experimentId, {
    label: DEMO_TOKEN_LABEL,
    role: "aux",
  });
  const peer = await createPeerToken(ctx, volunteer.user, input.experimentId, { label: DEMO_TOKEN_LABEL });
  return { auxToken: aux.token, peerToken: peer.token };
}

async function ensureUser(
  ctx: AppContext,
  username: string,
  password: string,
): Promise<{ user: { id: string; username: string }; created: boolean }> {
  const existing = await ctx.db.user.findUnique({ where: { username } });
  if (existing === null) {
    return { user: await createUserWithPassword(ctx, { username, password }), created: true };
  }
  if (existing.passwordHash === null || !(await verifyPassword(password, existing.passwordHash))) {
    await ctx.db.user.update({
      where: { id: existing.id },
      data: { passwordHash: await hashPassword(password) },
    });
  }
  return { user: { id: existing.id, username: existing.username }, created: false };
}
