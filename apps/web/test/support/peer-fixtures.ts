import {
  canonicalJson,
  decodePublicKey,
  generateKeyPair,
  parseExperimentConfig,
  peerIdFromEd25519PublicKey,
  PeerRole,
  signRequest,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { expect } from "vitest";
import type { JoinResponse } from "../../src/api/schemas/peer.ts";
import { POST as joinRoute } from "../../app/api/v1/experiments/[id]/join/route.ts";
import { newAuthorityKey } from "../../src/server/authority-keys.ts";
import { rotateAuthorityKey as rotateAuthorityKeyService } from "../../src/server/services/rotate-authority-key.ts";
import { generatePeerToken } from "../../src/server/services/peer-tokens.ts";
import { callRoute, TEST_SEALING_SECRET, type TestApp } from "./test-app.ts";

/**
 * Users, experiments, tokens and joined nodes for the peer API tests, made directly in the database
 * (plus the real join route for nodes), and signed requests as an aux peer sends them.
 */

let counter = 0;
function unique(prefix: string): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

export interface FixtureUser {
  readonly id: string;
  readonly username: string;
}

export async function createUser(app: TestApp, username = unique("user")): Promise<FixtureUser> {
  return app.db.user.create({ data: { username }, select: { id: true, username: true } });
}

export async function createExperiment(
  app: TestApp,
  organizer: FixtureUser,
  options: { id?: string; status?: "running" | "paused" } = {},
): Promise<{ id: string; name: string }> {
  const id = options.id ?? unique("exp");
  const key = newAuthorityKey([TEST_SEALING_SECRET], { experimentId: id, keyVersion: 1 });
  return app.db.experiment.create({
    data: {
      id,
      name: `Experiment ${id}`,
      organizerId: organizer.id,
      config: new TextDecoder().decode(canonicalJson(parseExperimentConfig({}))),
      status: options.status ?? "running",
      authorityPublicKey: key.publicKey,
      authoritySecretKey: key.sealedSecretKey,
    },
    select: { id: true, name: true },
  });
}

/**
 * Rotates the experiment's authority key as its organizer does on the manage page (the real
 * service: a new key, and a certificate signed by the old one). Returns the new version.
 */
export async function rotateAuthorityKey(app: TestApp, experimentId: string): Promise<number> {
  const { organizer } = await app.db.experiment.findUniqueOrThrow({
    where: { id: experimentId },
    select: { organizer: { select: { id: true, username: true } } },
  });
  const rotated = await rotateAuthorityKeyService(app.ctx, organizer, experimentId);
  return rotated.authorityKeyVersion;
}

export async function setAllowlistStatus(
  app: TestApp,
  experimentId: string,
  user: FixtureUser,
  status: "pending" | "approved" | "banned",
): Promise<void> {
  await app.db.allowlistEntry.upsert({
    where: { experimentId_userId: { experimentId, userId: user.id } },
    create: { experimentId, userId: user.id, status },
    update: { status },
  });
}

export interface FixtureToken {
  readonly id: string;
  /** The secret. */
  readonly token: string;
}

export async function createToken(
  app: TestApp,
  experimentId: string,
  user: FixtureUser,
  role: PeerRole = PeerRole.trainer,
): Promise<FixtureToken> {
  const secret = generatePeerToken();
  const row = await app.db.peerToken.create({
    data: {
      experimentId,
      userId: user.id,
      role,
      tokenHash: secret.tokenHash,
      prefix: secret.prefix,
    },
  });
  return { id: row.id, token: secret.token };
}

/** Calls the join route from an address of its own, so the per-address rate limit stays out of the way. */
export function callJoin(experimentId: string, body: unknown): Promise<Response> {
  counter += 1;
  return callRoute(joinRoute, `/api/v1/experiments/${experimentId}/join`, {
    method: "POST",
    params: { id: experimentId },
    body,
    headers: { "x-forwarded-for": `198.51.100.${counter % 250}, 10.0.0.1` },
  });
}

export interface JoinedNode {
  readonly key: KeyPair;
  readonly peerId: string;
  readonly join: JoinResponse;
  readonly authorityPublicKey: Uint8Array;
}

/** A node that joined with `token` (a fresh key unless given). */
export async function joinNode(
  experimentId: string,
  token: FixtureToken,
  key: KeyPair = generateKeyPair(),
): Promise<JoinedNode> {
  const response = await callJoin(experimentId, {
    token: token.token,
    publicKey: toBase64Url(key.publicKey),
  });
  const body = (await response.json()) as unknown;
  expect(response.status, JSON.stringify(body)).toBe(200);
  const join = body as JoinResponse;
  return {
    key,
    peerId: peerIdFromEd25519PublicKey(key.publicKey).toString(),
    join,
    authorityPublicKey: decodePublicKey(join.authorityPublicKey),
  };
}

export interface AuxSetup {
  readonly organizer: FixtureUser;
  readonly experimentId: string;
  readonly auxToken: FixtureToken;
  readonly aux: JoinedNode;
}

/** An experiment with its organizer and one joined aux peer. */
export async function setUpAux(app: TestApp, options: { experimentId?: string } = {}): Promise<AuxSetup> {
  const organizer = await createUser(app);
  const experiment = await createExperiment(app, organizer, { id: options.experimentId ?? unique("exp") });
  const auxToken = await createToken(app, experiment.id, organizer, PeerRole.aux);
  const aux = await joinNode(experiment.id, auxToken);
  return { organizer, experimentId: experiment.id, auxToken, aux };
}

export interface SignInit {
  readonly node: Pick<JoinedNode, "key" | "join" | "authorityPublicKey">;
  readonly method?: string;
  /** Path and query, exactly as requested. */
  readonly path: string;
  /** The bytes signed (the body's SHA-256 is what the request carries). */
  readonly body: Uint8Array | { sha256: Uint8Array };
  readonly time?: number;
  /** Another pass than the node's own. */
  readonly pass?: string;
  /** Another recipient than the experiment's authority key. */
  readonly recipient?: Uint8Array;
}

/** The Authorization header of a signed request. */
export function signedAuthorization(init: SignInit): string {
  const token = signRequest(nodeCrypto, init.node.key, {
    pass: init.pass ?? init.node.join.pass,
    recipientPublicKey: init.recipient ?? init.node.authorityPublicKey,
    scope: `${init.method ?? "POST"} ${init.path}`,
    body: init.body,
    time: init.time ?? Date.now(),
  });
  return `Barnraise ${token}`;
}

export function jsonBytes(value: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(value));
}

type Handler<P> = (req: Request, context: { params: Promise<P> }) => Promise<Response>;

/** POSTs `value` as JSON to `path`, signed by `node` for exactly those bytes and that path. */
export function postSignedJson<P>(
  handler: Handler<P>,
  path: string,
  params: P,
  node: SignInit["node"],
  value: unknown,
  options: { time?: number } = {},
): Promise<Response> {
  const body = jsonBytes(value);
  return callRoute(handler, path, {
    method: "POST",
    params,
    body,
    headers: {
      "content-type": "application/json",
      authorization: signedAuthorization({ node, path, body, ...options }),
    },
  });
}

/** GETs `path`, signed by `node` with an empty body for exactly that path (or as `options` say). */
export function getSigned<P>(
  handler: Handler<P>,
  path: string,
  params: P,
  node: SignInit["node"],
  options: Partial<Pick<SignInit, "time" | "pass" | "recipient" | "method">> & { signedPath?: string } = {},
): Promise<Response> {
  const { signedPath, ...sign } = options;
  return callRoute(handler, path, {
    params,
    headers: {
      authorization: signedAuthorization({
        node,
        method: "GET",
        path: signedPath ?? path,
        body: new Uint8Array(0),
        ...sign,
      }),
    },
  });
}

/** The error code of a failed response, with the body in the assertion message. */
export async function errorCode(response: Response): Promise<{ status: number; code: string }> {
  const body = (await response.json()) as { error?: { code?: string } };
  return { status: response.status, code: body.error?.code ?? `(no error: ${JSON.stringify(body)})` };
}

/** What the aux's validator reports about `peerId` (POST …/validator-flags): a node that hurt in 2 of 3 samples. */
export function validatorFlagEvidence(peerId: string, epoch = 12) {
  return {
    peerId,
    epoch,
    generation: 0,
    firstHurtEpoch: 11,
    baselineLoss: 1.25,
    lossAfter: 48.5,
    medianDelta: -0.004,
    normRatio: 1000.5,
    hurtSamples: 2,
    recentSamples: 3,
  };
}
