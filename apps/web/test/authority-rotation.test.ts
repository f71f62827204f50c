import {
  decodePublicKey,
  DEFAULT_ROTATION_GRACE_MS,
  followAuthorityRotations,
  issueAccessPass,
  PeerRole,
  ProtocolErrorCode,
  verifyAuthorityRotation,
  verifyRunControl,
  type KeyPair,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GET as getControl } from "../app/api/v1/experiments/[id]/control/route.ts";
import type { RunControlResponse } from "../src/api/schemas/peer.ts";
import { openAuthorityKeyPair } from "../src/server/authority-keys.ts";
import {
  createToken,
  createUser,
  errorCode,
  getSigned,
  joinNode,
  rotateAuthorityKey,
  setAllowlistStatus,
  setUpAux,
  type AuxSetup,
  type JoinedNode,
} from "./support/peer-fixtures.ts";
import { createTestApp, TEST_SEALING_SECRET, type TestApp } from "./support/test-app.ts";

/**
 * Rotating the authority key mid-run (manage page): the old key signs a certificate naming the new
 * one; join and run control answers carry the certificates, so nodes follow the new key; passes of
 * the old key issued before the rotation, and requests addressed to the old key, are taken for the
 * grace period after it and refused after it.
 */

const START = Date.UTC(2026, 11, 1, 12, 0, 0);

describe.each(testDatabaseProviders())("authority key rotation (%s)", (provider) => {
  let app: TestApp;
  let clock: number;
  let setup: AuxSetup;
  let controlPath: string;

  beforeEach(async () => {
    clock = START;
    app = await createTestApp(provider, { now: () => clock });
    setup = await setUpAux(app);
    controlPath = `/api/v1/experiments/${setup.experimentId}/control`;
  });
  afterEach(async () => {
    await app.dispose();
  });

  async function experimentRow() {
    return app.db.experiment.findUniqueOrThrow({ where: { id: setup.experimentId } });
  }

  /** Rotates one second from now, and returns the key pair that was replaced and the rotation time. */
  async function rotate(): Promise<{ previous: KeyPair; rotatedAt: number }> {
    const previous = openAuthorityKeyPair(await experimentRow(), [TEST_SEALING_SECRET]);
    clock += 1_000;
    const rotatedAt = clock;
    await rotateAuthorityKey(app, setup.experimentId);
    return { previous, rotatedAt };
  }

  /** GET /control signed by `node` at the clock's time, with its own pass unless told otherwise. */
  function readControl(node: JoinedNode, options: { pass?: string; recipient?: Uint8Array } = {}) {
    return getSigned(getControl, controlPath, { id: setup.experimentId }, node, { time: clock, ...options });
  }

  async function controlAnswer(response: Response): Promise<RunControlResponse> {
    const body = (await response.json()) as RunControlResponse;
    expect(response.status, JSON.stringify(body)).toBe(200);
    return body;
  }

  it("writes a certificate, signed by the replaced key, that names the new key", async () => {
    const { previous, rotatedAt } = await rotate();
    const experiment = await experimentRow();
    const rows = await app.db.authorityRotation.findMany({ where: { experimentId: setup.experimentId } });
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row).toMatchObject({
      keyVersion: 2,
      publicKey: experiment.authorityPublicKey,
      previousPublicKey: setup.aux.join.authorityPublicKey,
      rotatedAt: new Date(rotatedAt),
    });
    const certificate = verifyAuthorityRotation(nodeCrypto, row?.certificate, {
      experimentId: setup.experimentId,
    });
    expect(certificate).toMatchObject({
      keyVersion: 2,
      rotatedAt,
      publicKey: decodePublicKey(experiment.authorityPublicKey),
      previousPublicKey: previous.publicKey,
    });
    expect(experiment.authorityKeyVersion).toBe(2);
  });

  it("join and run control answers list the certificates, oldest first, and a node follows two rotations with them", async () => {
    expect(setup.aux.join.authorityRotations).toEqual([]);
    expect((await controlAnswer(await readControl(setup.aux))).authorityRotations).toEqual([]);
    const firstKey = setup.aux.authorityPublicKey;
    await rotate();
    await rotate();
    const current = decodePublicKey((await experimentRow()).authorityPublicKey);

    const rejoined = await joinNode(setup.experimentId, setup.auxToken, setup.aux.key);
    expect(rejoined.authorityPublicKey).toEqual(current);
    expect(rejoined.join.authorityRotations).toHaveLength(2);
    const followed = followAuthorityRotations(nodeCrypto, {
      from: firstKey,
      experimentId: setup.experimentId,
      certificates: rejoined.join.authorityRotations,
    });
    expect(followed.publicKey).toEqual(current);
    expect(followed.chain.map((rotation) => rotation.keyVersion)).toEqual([2, 3]);

    // A node still on the first key (within the grace) reads the control: it comes with the same
    // certificates, and verifies under the key they lead to.
    const answer = await controlAnswer(await readControl(setup.aux));
    expect(answer.authorityRotations).toEqual(rejoined.join.authorityRotations);
    expect(() =>
      verifyRunControl(nodeCrypto, answer.control, {
        authorityPublicKey: firstKey,
        experimentId: setup.experimentId,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONTROL_BAD_SIGNATURE }));
    expect(
      verifyRunControl(nodeCrypto, answer.control, {
        authorityPublicKey: current,
        experimentId: setup.experimentId,
      }).experimentId,
    ).toBe(setup.experimentId);
  });

  it("takes an old-key pass, and requests addressed to the old key, within the grace; refuses them after it", async () => {
    const trainer = await createUser(app);
    await setAllowlistStatus(app, setup.experimentId, trainer, "approved");
    const token = await createToken(app, setup.experimentId, trainer);
    const node = await joinNode(setup.experimentId, token);
    const { rotatedAt } = await rotate();
    const newKey = decodePublicKey((await experimentRow()).authorityPublicKey);

    // The node has not heard of the rotation: old pass, addressed to the old key.
    clock = rotatedAt + DEFAULT_ROTATION_GRACE_MS - 1;
    const answer = await controlAnswer(await readControl(node));
    expect(answer.authorityRotations).toHaveLength(1);
    // It followed the rotation but still holds its old pass.
    await controlAnswer(await readControl(node, { recipient: newKey }));

    clock = rotatedAt + DEFAULT_ROTATION_GRACE_MS;
    expect(await errorCode(await readControl(node))).toEqual({
      status: 401,
      code: ProtocolErrorCode.REQUEST_WRONG_RECIPIENT,
    });
    expect(await errorCode(await readControl(node, { recipient: newKey }))).toEqual({
      status: 401,
      code: ProtocolErrorCode.PASS_KEY_ROTATED,
    });

    // Joining again gives a pass of the new key, which works.
    const rejoined = await joinNode(setup.experimentId, token, node.key);
    expect(rejoined.authorityPublicKey).toEqual(newKey);
    await controlAnswer(await readControl(rejoined));
  });

  it("refuses a pass the old key signed after the rotation, even within the grace", async () => {
    const { previous, rotatedAt } = await rotate();
    clock = rotatedAt + 60_000;
    const issue = (issuedAt: number) =>
      issueAccessPass(nodeCrypto, previous, {
        experimentId: setup.experimentId,
        username: setup.organizer.username,
        role: PeerRole.aux,
        peerPublicKey: setup.aux.key.publicKey,
        grant: setup.auxToken.id,
        issuedAt,
        expiresAt: issuedAt + 3_600_000,
      });
    for (const issuedAt of [rotatedAt, rotatedAt + 1]) {
      expect(await errorCode(await readControl(setup.aux, { pass: issue(issuedAt) }))).toEqual({
        status: 401,
        code: ProtocolErrorCode.PASS_KEY_ROTATED,
      });
    }
    // The same key's pass of a moment before the rotation is still taken.
    await controlAnswer(await readControl(setup.aux, { pass: issue(rotatedAt - 1) }));
  });
});
