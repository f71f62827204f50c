import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { expect, test, type APIRequestContext, type Page } from "@playwright/test";
import {
  fromBase64Url,
  generateKeyPair,
  keyPairFromSecretKey,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";
import { PeerExit, startAux, startPeer } from "../support/barnraise-processes.ts";
import { recordMatcher, type LogRecord, type RunningProcess } from "../support/processes.ts";
import { baseURL } from "../support/run-env.ts";
import { createAuxToken, createPeerToken, publishRun } from "../support/runs.ts";
import { processStory } from "../support/story.ts";
import { addressesOf, runSwarmScript, type SwarmScriptInput } from "../support/swarm-scripts.ts";
import { register } from "../support/ui.ts";

// Lifecycles that people go through with their nodes (DESIGN §9), through the programs and pages
// they use: a volunteer revokes a token, makes a new one and restarts the same machine with it; a
// banned volunteer tries again with what they have left. Revocation names what was revoked (the
// token's passes, the banned user), never a node's key forever, and what the platform shows of a
// node comes from what the swarm did with it.

const TARGET_BATCH = 512;
const LOCAL_BATCH = 64;

const { processes, contexts, workDir } = processStory("node-lifecycles");

/** A "step N" record of a round whose result held another trainer's samples. */
const sharedStep = recordMatcher(
  /^step \d+$/,
  (record) => Number(record.samples) > Number(record.localSamples) && Number(record.groupSize) >= 2,
);

interface Run {
  readonly experimentId: string;
  readonly organizer: Page;
  readonly aux: RunningProcess;
  readonly organizerPeer: RunningProcess;
}

/**
 * An organizer publishes a small run, allowlists `volunteers`, starts an aux peer and a peer of
 * their own (so a volunteer's node has someone to average with).
 */
async function startRun(
  newPage: () => Promise<Page>,
  suffix: string,
  volunteers: readonly string[],
): Promise<Run> {
  const organizer = await newPage();
  await register(organizer, `organizer-${suffix}`);
  const experimentId = `lifecycle-${suffix}`;
  await publishRun(organizer, {
    id: experimentId,
    name: `Lifecycles ${suffix}`,
    targetBatch: TARGET_BATCH,
    localBatch: LOCAL_BATCH,
    checkpointEvery: 20,
  });
  for (const username of volunteers) {
    await organizer.getByLabel("Add a volunteer by username").fill(username);
    await organizer.getByRole("button", { name: "Add to allowlist" }).click();
    await expect(organizer.getByTestId(`allowlist-${username}`)).toBeVisible();
  }
  const auxToken = await createAuxToken(organizer, "aux");
  const aux = startAux(processes, `aux-${suffix}`, {
    server: baseURL,
    token: auxToken,
    dir: join(workDir(), `aux-${suffix}`),
  });
  await aux.waitForRecord("registered address", recordMatcher("registered address"), 60_000);
  const organizerToken = await createPeerToken(organizer, experimentId, "organizer's desktop");
  const organizerPeer = peer(`organizer-peer-${suffix}`, organizerToken);
  await organizerPeer.waitForRecord("joined", recordMatcher(/^joined experiment/), 60_000);
  return { experimentId, organizer, aux, organizerPeer };
}

/** A volunteer's `barnraise-peer` whose identity and data live in the directory named `name`. */
function peer(name: string, token: string, dir = name): RunningProcess {
  return startPeer(processes, name, {
    server: baseURL,
    token,
    dir: join(workDir(), dir),
    batchSize: LOCAL_BATCH,
  });
}

/** The node's libp2p PeerId, from its first log records. */
async function peerIdOf(node: RunningProcess): Promise<string> {
  const identity = await node.waitForRecord(
    "identity",
    recordMatcher(/identity/, (r) => "peerId" in r),
    60_000,
  );
  return String(identity.peerId);
}

/** The signed-in user's node `peerId` as "My nodes" lists it. */
async function myNode(request: APIRequestContext, peerId: string) {
  const response = await request.get("/api/v1/me/nodes");
  expect(response.status()).toBe(200);
  const { nodes } = (await response.json()) as {
    nodes: {
      peerId: string;
      counted: boolean;
      reason: string | null;
      swarmRefusal: { code: string; reason: string } | null;
    }[];
  };
  return nodes.find((node) => node.peerId === peerId);
}

test("a volunteer revokes a token, makes a new one and restarts the same machine: it averages with the others and is counted within 60 s", async ({
  browser,
}, testInfo) => {
  test.setTimeout(5 * 60_000);
  const suffix = `retoken-${Date.now().toString(36)}`;
  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const veraName = `vera-${suffix}`;
  const vera = await newPage();
  await register(vera, veraName);
  const run = await startRun(newPage, suffix, [veraName]);

  const firstToken = await createPeerToken(vera, run.experimentId, "laptop");
  const laptop = peer("vera-laptop", firstToken);
  const peerId = await peerIdOf(laptop);
  await test.step("the volunteer's node trains with the organizer's", async () => {
    await laptop.waitForRecord("a shared step", sharedStep, 120_000);
    await run.organizerPeer.waitForRecord("a shared step", sharedStep, 60_000);
    await expect
      .poll(async () => (await myNode(vera.request, peerId))?.counted, { timeout: 30_000 })
      .toBe(true);
  });

  // A pass of the laptop's own key issued on the first token, kept to show what the swarm does with
  // it once the token is revoked (a leaked copy, or a process that did not stop).
  const laptopKey = await identityKey(join(workDir(), "vera-laptop", "identity.json"));
  const oldJoin = await vera.request.post("/api/v1/join", {
    data: { token: firstToken, publicKey: toBase64Url(laptopKey.publicKey) },
  });
  expect(oldJoin.status()).toBe(200);
  const oldPass = (await oldJoin.json()) as { pass: string; authorityPublicKey: string };

  const auxBeforeRevoke = new Set<LogRecord>(run.aux.records());
  await test.step("she revokes the token on the page: the node leaves", async () => {
    await vera.goto(`/experiments/${run.experimentId}/volunteer`);
    const tokens = vera.getByRole("list", { name: "Your tokens" });
    await tokens.getByRole("button", { name: /^Revoke/ }).click();
    await tokens.getByRole("button", { name: /^Yes, revoke/ }).click();
    await expect(tokens.getByText("Revoked", { exact: true })).toBeVisible();
    const status = await laptop.waitForExit(30_000);
    expect(status, laptop.tail(20)).toEqual({ code: PeerExit.badToken, signal: null });
  });

  await test.step("the swarm refuses the revoked token's pass, and My nodes says so and what to do", async () => {
    // The aux has the organizer's new orders (its poll runs every 5 s).
    await run.aux.waitForRecord(
      "the run control that revokes the token",
      recordMatcher("adopted a newer run control", (record) => !auxBeforeRevoke.has(record)),
      30_000,
    );
    const answers = await probe(
      {
        experimentId: run.experimentId,
        authorityPublicKey: oldPass.authorityPublicKey,
        pass: oldPass.pass,
        secretKey: laptopKey,
        addresses: await addressesOf(run.aux),
      },
      60_000,
    );
    expect(answers).toEqual([
      expect.objectContaining({ accepted: false, reason: expect.stringContaining("was revoked") }),
    ]);
    // The aux reports the refusal in its next heartbeats.
    await expect
      .poll(async () => await myNode(vera.request, peerId), { timeout: 30_000, intervals: [1_000] })
      .toMatchObject({ counted: false, reason: "token_revoked" });
    const row = await myNode(vera.request, peerId);
    expect(row?.swarmRefusal).toMatchObject({ code: "PASS_REVOKED" });
  });

  await test.step("a new token on the same machine: averaging with the others and counted within 60 s", async () => {
    const secondToken = await createPeerToken(vera, run.experimentId, "laptop, again");
    const organizerBefore = new Set<LogRecord>(run.organizerPeer.records());
    const auxBefore = new Set<LogRecord>(run.aux.records());
    const restartedAt = Date.now();
    const again = peer("vera-laptop-again", secondToken, "vera-laptop");
    expect(await peerIdOf(again)).toBe(peerId);

    await again.waitForRecord("a shared step", sharedStep, 60_000);
    const sharedAfter = (Date.now() - restartedAt) / 1000;
    await expect
      .poll(() => run.organizerPeer.filter((r) => !organizerBefore.has(r) && sharedStep(r)).length, {
        timeout: Math.max(1, restartedAt + 60_000 - Date.now()),
      })
      .toBeGreaterThan(0);
    await expect
      .poll(async () => await myNode(vera.request, peerId), {
        timeout: Math.max(1, restartedAt + 60_000 - Date.now()),
        intervals: [1_000],
      })
      .toMatchObject({ counted: true, reason: null });
    const countedAfter = (Date.now() - restartedAt) / 1000;
    await vera.goto(`/experiments/${run.experimentId}/volunteer`);
    await expect(vera.getByRole("list", { name: "Nodes" }).getByText("Counted")).toBeVisible();

    // Nobody refused the node's new pass.
    const refusals = [...run.organizerPeer.records(), ...run.aux.records()].filter(
      (record) =>
        !organizerBefore.has(record) &&
        !auxBefore.has(record) &&
        JSON.stringify(record).includes(peerId) &&
        /refused|revoked/.test(JSON.stringify(record)),
    );
    expect(refusals).toEqual([]);
    expect(again.filter(recordMatcher(/refused by the swarm|cut off from the swarm/))).toEqual([]);
    testInfo.annotations.push(
      { type: "restart to first shared step", description: `${sharedAfter.toFixed(1)} s` },
      { type: "restart to counted on My nodes", description: `${countedAfter.toFixed(1)} s` },
    );
  });
});

test("a banned volunteer is refused by the platform and by every peer, with a new token or a pass from before the ban", async ({
  browser,
  request,
}) => {
  test.setTimeout(5 * 60_000);
  const suffix = `ban-${Date.now().toString(36)}`;
  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const malloryName = `mallory-${suffix}`;
  const mallory = await newPage();
  await register(mallory, malloryName);
  const run = await startRun(newPage, suffix, [malloryName]);
  const token = await createPeerToken(mallory, run.experimentId, "desktop");
  const desktop = peer("mallory-desktop", token);
  await desktop.waitForRecord("a shared step", sharedStep, 120_000);
  const members = [...(await addressesOf(run.aux)), ...(await addressesOf(run.organizerPeer))];

  // A pass of hers issued just before the ban, for a key of another machine of hers.
  const spare = generateKeyPair();
  const joined = await request.post("/api/v1/join", {
    data: { token, publicKey: toBase64Url(spare.publicKey) },
  });
  expect(joined.status()).toBe(200);
  const spareJoin = (await joined.json()) as { pass: string; authorityPublicKey: string };

  await test.step("the organizer bans her: her running node leaves", async () => {
    await run.organizer.goto(`/experiments/${run.experimentId}/manage`);
    const entry = run.organizer.getByTestId(`allowlist-${malloryName}`);
    await entry.getByRole("button", { name: `Ban ${malloryName}` }).click();
    await expect(
      run.organizer.getByText(`${malloryName} is banned; their nodes are no longer counted.`),
    ).toBeVisible();
    expect(await desktop.waitForExit(30_000), desktop.tail(20)).toEqual({
      code: PeerExit.banned,
      signal: null,
    });
  });

  await test.step("no new token for her, and her old one is refused at the door", async () => {
    const created = await mallory.request.post(`/api/v1/experiments/${run.experimentId}/tokens`, {
      data: { label: "another try" },
    });
    expect(created.status()).toBe(403);
    expect(((await created.json()) as { error: { code: string } }).error.code).toBe("BANNED");
    const retry = peer("mallory-retry", token);
    expect(await retry.waitForExit(60_000), retry.tail(20)).toEqual({ code: PeerExit.banned, signal: null });
  });

  await test.step("every peer refuses the pass she got before the ban", async () => {
    const answers = await probe(
      {
        experimentId: run.experimentId,
        authorityPublicKey: spareJoin.authorityPublicKey,
        pass: spareJoin.pass,
        secretKey: spare,
        addresses: members,
      },
      60_000,
    );
    expect(answers.map((answer) => answer.address).sort()).toEqual([...members].sort());
    for (const answer of answers) {
      expect(answer, JSON.stringify(answer)).toMatchObject({ accepted: false });
      expect(answer.reason).toContain(`${malloryName} was banned or removed`);
    }
  });
});

/** The key pair in a node's identity file (see packages/swarm/src/identity-file.ts). */
async function identityKey(path: string): Promise<KeyPair> {
  const file = JSON.parse(await readFile(path, "utf8")) as { secretKey: string };
  return keyPairFromSecretKey(fromBase64Url(file.secretKey, "secret key"));
}

test("the organizer rotates the authority key mid-run: running peers, the aux and a newcomer go on within 60 s", async ({
  browser,
}, testInfo) => {
  test.setTimeout(5 * 60_000);
  const suffix = `rotate-${Date.now().toString(36)}`;
  const newPage = async (): Promise<Page> => {
    const context = await browser.newContext();
    contexts.push(context);
    return context.newPage();
  };
  const veraName = `vera-${suffix}`;
  const vera = await newPage();
  await register(vera, veraName);
  const run = await startRun(newPage, suffix, [veraName]);
  const token = await createPeerToken(vera, run.experimentId, "two machines");
  const first = peer("vera-first", token);
  await first.waitForRecord("a shared step", sharedStep, 120_000);
  await run.organizerPeer.waitForRecord("a shared step", sharedStep, 60_000);

  const running = [run.aux, run.organizerPeer, first];
  const before = new Map(running.map((node) => [node, new Set<LogRecord>(node.records())]));
  const after = (node: RunningProcess) => (record: LogRecord) => !(before.get(node)?.has(record) ?? false);
  await run.organizer.goto(`/experiments/${run.experimentId}/manage`);
  await run.organizer.getByRole("button", { name: "Rotate the authority key…" }).click();
  await run.organizer.getByRole("button", { name: "Yes, rotate the key" }).click();
  await expect(run.organizer.getByText(/key version\s*2/i)).toBeVisible({ timeout: 10_000 });
  const rotatedAt = Date.now();
  // A newcomer joins right away: its pass is signed by the new key only.
  const newcomer = peer("vera-newcomer", token);
  const within = () => Math.max(1, rotatedAt + 60_000 - Date.now());

  await test.step("every running node follows the new key and keeps training with the others", async () => {
    for (const node of running) {
      await node.waitForRecord(
        "following the rotation",
        recordMatcher(/rotated the experiment's authority key/, after(node)),
        within(),
      );
    }
    for (const node of [run.organizerPeer, first]) {
      await node.waitForRecord(
        "a shared step after the rotation",
        (r) => after(node)(r) && sharedStep(r),
        within(),
      );
    }
    await run.aux.waitForRecord(
      "a step recorded after the rotation",
      recordMatcher("metrics posted", after(run.aux)),
      within(),
    );
  });

  await test.step("the newcomer, with a pass of the new key, averages with them", async () => {
    await newcomer.waitForRecord("a shared step", sharedStep, within());
    testInfo.annotations.push({
      type: "rotation to the newcomer's first shared step",
      description: `${((Date.now() - rotatedAt) / 1000).toFixed(1)} s`,
    });
  });
  for (const node of [...running, newcomer]) {
    expect(
      node.filter((record) => record.level === 50 || record.level === 60),
      node.name,
    ).toEqual([]);
  }
  await expect
    .poll(async () => (await myNode(vera.request, await peerIdOf(newcomer)))?.counted, {
      timeout: within(),
    })
    .toBe(true);
});

interface ProbeAnswer {
  readonly address: string;
  readonly accepted: boolean;
  readonly reason?: string;
}

/** Runs `support/swarm-probe.ts` with a pass and a key, and reads what each member said. */
function probe(input: SwarmScriptInput, timeoutMs: number): Promise<ProbeAnswer[]> {
  return runSwarmScript<ProbeAnswer>("swarm-probe.ts", input, timeoutMs);
}
