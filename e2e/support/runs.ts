import { expect, type APIRequestContext, type APIResponse, type Page } from "@playwright/test";

/** What the organizer types into the new-experiment form for a small `mnist-mlp` run. */
export interface SmallRun {
  readonly id: string;
  readonly name: string;
  readonly targetBatch: number;
  readonly localBatch: number;
  readonly checkpointEvery: number;
  readonly learningRate?: number;
  readonly hiddenUnits?: number;
  /** How reducers combine contributions; the form's default (CenteredClip) when absent. */
  readonly aggregation?: "mean" | "centered-clip";
}

/**
 * Fills the form's training settings of a small run (a fixed local batch instead of the automatic
 * one), creates the experiment, and waits for its manage page.
 */
export async function createSmallRun(
  organizer: Page,
  run: Pick<SmallRun, "id" | "targetBatch" | "localBatch" | "checkpointEvery" | "learningRate">,
): Promise<void> {
  await organizer.getByLabel("Target batch size").fill(String(run.targetBatch));
  await organizer.getByRole("checkbox", { name: /^Automatic/ }).uncheck();
  await organizer.getByLabel("Local batch size").fill(String(run.localBatch));
  await organizer.getByLabel("Learning rate", { exact: true }).fill(String(run.learningRate ?? 0.01));
  await organizer.getByLabel("Checkpoint every (steps)").fill(String(run.checkpointEvery));
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await organizer.waitForURL(/\/experiments\/[^/]+\/manage$/);
  expect(new URL(organizer.url()).pathname).toBe(`/experiments/${run.id}/manage`);
}

/** Publishes the run through the form; the page ends on its manage page. */
export async function publishRun(organizer: Page, run: SmallRun): Promise<void> {
  await organizer.goto("/experiments/new");
  await organizer.getByLabel("Experiment id").fill(run.id);
  await organizer.getByLabel("Name", { exact: true }).fill(run.name);
  await organizer.getByLabel("Description").fill("A small MLP on MNIST digits, trained by volunteers.");
  await organizer.getByLabel("Model kind").selectOption("mnist-mlp");
  await organizer.getByLabel("Hidden layer sizes").fill(String(run.hiddenUnits ?? 32));
  await organizer.getByLabel("Target batch size").fill(String(run.targetBatch));
  await organizer.getByRole("checkbox", { name: /^Automatic/ }).uncheck();
  await organizer.getByLabel("Local batch size").fill(String(run.localBatch));
  await organizer.getByLabel("Stop after (steps)").fill("");
  await organizer.getByLabel("Learning rate").fill(String(run.learningRate ?? 0.01));
  await organizer.getByLabel("Checkpoint every (steps)").fill(String(run.checkpointEvery));
  if (run.aggregation !== undefined) await organizer.getByLabel("Aggregation").selectOption(run.aggregation);
  await organizer.getByRole("button", { name: "Create experiment" }).click();
  await organizer.waitForURL(/\/experiments\/[^/]+\/manage$/);
  expect(new URL(organizer.url()).pathname).toBe(`/experiments/${run.id}/manage`);
  await expect(organizer.getByLabel("Checkpoint every (steps)")).toHaveValue(String(run.checkpointEvery));
}

/**
 * The command a page shows for running `program` with `token`: the platform's own build of it,
 * through npx (`npx -y <origin>/api/v1/programs/<program>-<version>-<sha256 prefix>.tgz --server
 * <origin> --token <token>`).
 */
export function programCommandPattern(
  program: "barnraise-peer" | "barnraise-aux",
  origin: string,
  token: string,
): RegExp {
  const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(
    `^npx -y ${escaped(origin)}/api/v1/programs/${program}-[0-9A-Za-z.+-]+-[0-9a-f]{12}\\.tgz ` +
      `--server ${escaped(origin)} --token ${escaped(token)}$`,
  );
}

/** The command shown in a token's secret box (`region`: "New token" or "New aux token"). */
export async function shownCommand(page: Page, region: "New token" | "New aux token"): Promise<string> {
  return (
    (await page.getByRole("region", { name: region }).getByLabel("the command").textContent())?.trim() ?? ""
  );
}

/**
 * On the manage page: creates an aux token and reads its secret, shown this once with the command
 * to run (checked to be the platform's `barnraise-aux` with `--server <origin> --token <secret>`).
 */
export async function createAuxToken(organizer: Page, label: string): Promise<string> {
  const auxSection = organizer.getByRole("region", { name: "Aux peers" });
  await auxSection.getByLabel("Label (optional)").fill(label);
  await auxSection.getByRole("button", { name: "Create aux token" }).click();
  const secretBox = organizer.getByRole("region", { name: "New aux token" });
  await expect(secretBox).toBeVisible();
  const token = (await secretBox.getByLabel("the new aux token").textContent())?.trim() ?? "";
  expect(token).not.toBe("");
  await expect(secretBox.getByLabel("the command")).toHaveText(
    programCommandPattern("barnraise-aux", new URL(organizer.url()).origin, token),
  );
  return token;
}

/** On the volunteer page: creates a peer token and reads its secret, shown this once. */
export async function createPeerToken(page: Page, experimentId: string, label: string): Promise<string> {
  await page.goto(`/experiments/${experimentId}/volunteer`);
  await page.getByLabel("Label (optional)").fill(label);
  await page.getByRole("button", { name: "Create token" }).click();
  const secretBox = page.getByRole("region", { name: "New token" });
  await expect(secretBox).toBeVisible();
  const token = (await secretBox.getByLabel("the new token").textContent())?.trim() ?? "";
  expect(token).toMatch(/^brp_[A-Za-z0-9_-]{43}$/);
  return token;
}

/** The samples the public leaderboard credits to `username` in an experiment (0 when not listed). */
export async function leaderboardSamples(
  request: APIRequestContext,
  experimentId: string,
  username: string,
): Promise<number> {
  const { entries } = await getJson<{ entries: readonly { username: string; samples: number }[] }>(
    request,
    `/api/v1/experiments/${experimentId}/leaderboard`,
  );
  return entries.find((entry) => entry.username === username)?.samples ?? 0;
}

/**
 * A GET, sent once more when the connection it went out on was closed under it. Playwright's request
 * context pools keep-alive connections and may reuse one just as the platform closes it (Node's
 * server closes a connection idle for 5 s): the request then fails with "read ECONNRESET" or "socket
 * hang up" although the platform never read it. A browser sends such a request again, and so does
 * this; any other failure, and any answer, is returned as it came.
 */
export async function getWithReconnect(request: APIRequestContext, path: string): Promise<APIResponse> {
  try {
    return await request.get(path);
  } catch (error) {
    if (!/ECONNRESET|socket hang up/.test(String(error))) throw error;
    return await request.get(path);
  }
}

/** A public read of the platform's API that must answer 200. */
export async function getJson<T>(request: APIRequestContext, path: string): Promise<T> {
  const response = await getWithReconnect(request, path);
  expect(response.status(), `GET ${path}`).toBe(200);
  return (await response.json()) as T;
}

/** The public views the stories read. */
export interface MetricPoint {
  readonly step: number;
  readonly loss: number;
  readonly alivePeers: number;
  /** The samples the aux accepted into the step's round; null when it reduced no part of it. */
  readonly samples: number | null;
  readonly recordedAt: string;
  readonly timeline: number;
  readonly discarded: boolean;
}
export interface RunEvent {
  readonly kind: "resumed" | "rolled-back";
  readonly step: number;
  readonly fromStep: number | null;
  readonly timeline: number;
}
export interface Metrics {
  readonly points: readonly MetricPoint[];
  readonly total: number;
  readonly events: readonly RunEvent[];
}
export interface Checkpoint {
  readonly id: string;
  readonly step: number;
  readonly loss: number | null;
  readonly sizeBytes: number;
  readonly sha256: string;
  readonly downloadUrl: string;
}
