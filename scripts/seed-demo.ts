// Seeds the demo organizer and experiment into the database of the environment (DATABASE_URL or the
// SQLite file in BARNRAISE_DATA_DIR). Idempotent. scripts/demo.sh runs it; the secrets come from there.
// With --tokens-file, it also allowlists the demo volunteer and writes fresh tokens for the demo's
// local aux peer and volunteer peers to that file (mode 600) as DEMO_AUX_TOKEN=… and DEMO_PEER_TOKEN=….
//
//   DEMO_ORGANIZER_PASSWORD=… node scripts/seed-demo.ts [--tokens-file FILE]
import { writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { createAppContext } from "../apps/web/src/server/context.ts";
import { EnvError, loadServerEnv } from "../apps/web/src/server/env.ts";
import { seedDemo, seedDemoSwarm } from "../apps/web/src/server/seed/seed-demo.ts";

export const DEMO_ORGANIZER = "demo-organizer";
export const DEMO_EXPERIMENT_ID = "demo";
export const DEMO_VOLUNTEER = "demo-volunteer";

const { values } = parseArgs({ options: { "tokens-file": { type: "string" } } });

const password = process.env.DEMO_ORGANIZER_PASSWORD;
if (password === undefined || password.length < 8) {
  console.error("[barnraise] DEMO_ORGANIZER_PASSWORD must be set (8 characters or more)");
  process.exit(64);
}

try {
  const ctx = createAppContext(loadServerEnv(), {});
  const result = await seedDemo(ctx, {
    organizerUsername: DEMO_ORGANIZER,
    organizerPassword: password,
    experimentId: DEMO_EXPERIMENT_ID,
  });
  const what = [
    result.created.organizer ? "created organizer" : "organizer exists",
    result.created.experiment ? "created experiment" : "experiment exists",
  ];
  console.error(
    `[barnraise] demo: ${what.join(", ")} (${result.organizer.username}, ${result.experiment.id})`,
  );
  const tokensFile = values["tokens-file"];
  if (tokensFile !== undefined) {
    const tokens = await seedDemoSwarm(ctx, {
      organizerUsername: DEMO_ORGANIZER,
      volunteerUsername: DEMO_VOLUNTEER,
      password,
      experimentId: DEMO_EXPERIMENT_ID,
    });
    await writeFile(tokensFile, `DEMO_AUX_TOKEN=${tokens.auxToken}\nDEMO_PEER_TOKEN=${tokens.peerToken}\n`, {
      mode: 0o600,
    });
    console.error(
      `[barnraise] demo: ${DEMO_VOLUNTEER} allowlisted; tokens for the local swarm in ${tokensFile}`,
    );
  }
  await ctx.db.$disconnect();
} catch (error) {
  console.error(
    `[barnraise] seeding the demo failed: ${error instanceof EnvError ? error.message : String(error)}`,
  );
  process.exit(1);
}
