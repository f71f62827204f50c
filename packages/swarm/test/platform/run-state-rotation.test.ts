import { createHash } from "node:crypto";
import { generateKeyPair, signCheckpointAttestation, type KeyPair } from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { describe, expect, it } from "vitest";
import { PlatformClient } from "../../src/platform/platform-client.ts";
import { loadLatestCheckpoint } from "../../src/platform/run-state-client.ts";
import { serializeTrainingState } from "../../src/state/state-snapshot.ts";
import { silentLogger, TestAuthority } from "../support/swarm-fixtures.ts";

/**
 * The platform signs a checkpoint's attestation when it is read, with the authority's current key.
 * A node that has not followed a rotation yet finds the rotation certificates through the run
 * control and checks the attestation again; one signed by a key nobody vouched for is refused.
 */

const STATE = serializeTrainingState({
  epoch: 12,
  parameters: new Float32Array([1, 2, 3]),
  optimizer: { name: "adam", step: 12, slots: {} },
});
const SHA256 = createHash("sha256").update(STATE).digest("hex");

/** A platform answering /checkpoints/latest (attested by `signer`), /control and the download. */
function fakePlatform(authority: TestAuthority, signer: () => KeyPair): typeof fetch {
  return (input) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const json = (body: unknown) =>
      Promise.resolve(
        new Response(JSON.stringify(body), { headers: { "content-type": "application/json" } }),
      );
    if (url.pathname.endsWith("/checkpoints/latest")) {
      return json({
        checkpoint: { id: "ckpt-12", downloadUrl: "checkpoints/ckpt-12", evaluation: null },
        attestation: signCheckpointAttestation(nodeCrypto, signer(), {
          experimentId: authority.experimentId,
          checkpointId: "ckpt-12",
          step: 12,
          sha256: SHA256,
          sizeBytes: STATE.byteLength,
          generation: 0,
          timeline: 0,
          configVersion: 1,
          createdAt: Date.now(),
        }),
      });
    }
    if (url.pathname.endsWith("/control")) {
      return json({ control: authority.runControl(), authorityRotations: authority.certificates });
    }
    return Promise.resolve(new Response(new Uint8Array(STATE)));
  };
}

function clientOf(authority: TestAuthority, signer: () => KeyPair) {
  const keys = authority.keys({ logger: silentLogger });
  const identity = generateKeyPair();
  const client = new PlatformClient({
    server: new URL("http://platform.invalid/"),
    experimentId: authority.experimentId,
    keyPair: identity,
    authority: keys,
    pass: () => authority.pass(identity),
    fetch: fakePlatform(authority, signer),
  });
  return { client, keys };
}

describe("loadLatestCheckpoint across a key rotation", () => {
  it("follows the rotation through the run control when the attestation is signed by the new key", async () => {
    const authority = new TestAuthority("exp-ckpt");
    const { client, keys } = clientOf(authority, () => authority.keyPair);
    authority.rotate();
    const latest = await loadLatestCheckpoint(client);
    expect(latest?.attestation.step).toBe(12);
    expect(latest?.state.epoch).toBe(12);
    expect(keys.publicKey).toEqual(authority.keyPair.publicKey);
  });

  it("takes an attestation of the replaced key within its grace, and refuses one of a key nobody vouched for", async () => {
    const authority = new TestAuthority("exp-ckpt");
    const first = authority.keyPair;
    let signer = first;
    const { client, keys } = clientOf(authority, () => signer);
    authority.rotate();
    keys.follow(authority.certificates);
    expect((await loadLatestCheckpoint(client))?.attestation.checkpointId).toBe("ckpt-12");

    signer = generateKeyPair();
    await expect(loadLatestCheckpoint(client)).rejects.toMatchObject({ code: "CHECKPOINT_BAD_SIGNATURE" });
    expect(keys.publicKey).toEqual(authority.keyPair.publicKey);
  });
});
