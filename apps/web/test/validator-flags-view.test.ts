import { describe, expect, it } from "vitest";
import { flagEvidence, rollbackTarget, shortPeerId } from "../app/_components/validator-flag-text.ts";
import type { CheckpointView } from "../src/api/schemas/public.ts";
import type { ValidatorFlagView } from "../src/api/schemas/validator-flags.ts";

// The manage page's "Flagged by the validator" rows: the evidence sentence and the checkpoint
// offered for a rollback.

function checkpoint(step: number, generation = 0): CheckpointView {
  const downloadUrl = `/api/v1/experiments/demo/checkpoints/c${step}-${generation}`;
  return {
    id: `c${step}-${generation}`,
    step,
    loss: 0.5,
    sizeBytes: 1000,
    sha256: String(step % 10).repeat(64),
    generation,
    timeline: generation,
    createdAt: new Date(Date.UTC(2026, 10, 21, 10, 0, step)).toISOString(),
    downloadUrl,
    safetensorsUrl: `${downloadUrl}/safetensors`,
    tfjsUrl: null,
    evaluation: null,
  };
}

const flag: ValidatorFlagView = {
  peerId: "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz",
  username: "mallory",
  ownerStatus: "approved",
  tokenRevoked: false,
  epoch: 14,
  generation: 0,
  firstHurtEpoch: 9,
  baselineLoss: 1.23456,
  lossAfter: 87.654321,
  medianDelta: -0.0012,
  normRatio: 1000.25,
  hurtSamples: 2,
  recentSamples: 3,
  reports: 1,
  firstFlaggedAt: "2026-11-30T10:00:00.000Z",
  reportedAt: "2026-11-30T10:00:00.000Z",
};

describe("flagEvidence", () => {
  it("says the epoch, the loss before and after, the median step's change and the size ratio", () => {
    expect(flagEvidence(flag)).toBe(
      "Epoch 14: a step along its contribution took the held-out loss from 1.235 to 87.65 " +
        "(the median trainer’s step changed it by -0.0012); its contribution is 1000× the median’s size. " +
        "Hurting since epoch 9.",
    );
    expect(flagEvidence({ ...flag, lossAfter: null, medianDelta: 0.002 })).toContain(
      "from 1.235 to a loss that is not finite (the median trainer’s step changed it by +0.002)",
    );
  });
});

describe("rollbackTarget", () => {
  // Newest step first, as the checkpoint list gives them; generation 1 began after a rollback.
  const checkpoints = [checkpoint(12, 1), checkpoint(12), checkpoint(9), checkpoint(6), checkpoint(3)];

  it("offers the newest checkpoint of the flag's generation at or before the first epoch that hurt", () => {
    expect(rollbackTarget(flag, checkpoints, 0)?.id).toBe("c9-0");
    expect(rollbackTarget({ ...flag, firstHurtEpoch: 8 }, checkpoints, 0)?.id).toBe("c6-0");
    expect(rollbackTarget({ ...flag, firstHurtEpoch: 2 }, checkpoints, 0)).toBeUndefined();
  });

  it("offers none once the run was rolled back past the flag's generation", () => {
    expect(rollbackTarget(flag, checkpoints, 1)).toBeUndefined();
    expect(rollbackTarget({ ...flag, generation: 1, firstHurtEpoch: 13 }, checkpoints, 1)?.id).toBe("c12-1");
  });
});

describe("shortPeerId", () => {
  it("keeps the start and the end of a long PeerId", () => {
    expect(shortPeerId(flag.peerId)).toBe("12D3KooW…WxYz");
    expect(shortPeerId("short")).toBe("short");
  });
});
