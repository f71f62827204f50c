import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  generateKeyPair,
  issueAccessPass,
  parseExperimentConfig,
  portableCrypto,
  ProtocolErrorCode,
  SignatureDomain,
  signExperimentConfig,
  signingBytes,
  toBase64Url,
  verifyExperimentConfig,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { EXPERIMENT, NOW, tamperPayload } from "./fixtures.ts";

describe.each([portableCrypto, nodeCrypto])("signed experiment config ($name)", (crypto) => {
  const authority = generateKeyPair();
  const config = parseExperimentConfig({ training: { targetBatchSize: 512 } });
  const token = signExperimentConfig(crypto, authority, {
    experimentId: EXPERIMENT,
    version: 3,
    issuedAt: NOW,
    config,
  });
  const expected = { authorityPublicKey: authority.publicKey, experimentId: EXPERIMENT };

  it("round-trips the config, version and time", () => {
    const signed = verifyExperimentConfig(crypto, token, expected);
    expect(signed).toEqual({ experimentId: EXPERIMENT, version: 3, issuedAt: NOW, config, token });
  });

  it("refuses a config whose hyperparameters were tampered with", () => {
    const tampered = tamperPayload(token, (payload) => {
      (payload["config"] as { training: { targetBatchSize: number } }).training.targetBatchSize = 1;
    });
    expect(() => verifyExperimentConfig(crypto, tampered, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONFIG_BAD_SIGNATURE }),
    );
  });

  it("refuses a config rolled back to another version", () => {
    const tampered = tamperPayload(token, (payload) => {
      payload["version"] = 2;
    });
    expect(() => verifyExperimentConfig(crypto, tampered, expected)).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONFIG_BAD_SIGNATURE }),
    );
  });

  it("refuses a config signed by another authority", () => {
    expect(() =>
      verifyExperimentConfig(crypto, token, {
        authorityPublicKey: generateKeyPair().publicKey,
        experimentId: EXPERIMENT,
      }),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONFIG_BAD_SIGNATURE }));
  });

  it("refuses a config of another experiment", () => {
    expect(() => verifyExperimentConfig(crypto, token, { ...expected, experimentId: "exp-2" })).toThrow(
      expect.objectContaining({ code: ProtocolErrorCode.CONFIG_WRONG_EXPERIMENT }),
    );
  });

  it("never accepts an authority's pass signature as a config signature (domain separation)", () => {
    const pass = issueAccessPass(crypto, authority, {
      experimentId: EXPERIMENT,
      username: "alice",
      role: "trainer",
      peerPublicKey: generateKeyPair().publicKey,
      grant: "token-1",
      issuedAt: NOW,
      expiresAt: NOW + 1,
    });
    const [, passSignature] = pass.split(".");
    const [configPayload] = token.split(".");
    expect(() =>
      verifyExperimentConfig(crypto, `${configPayload ?? ""}.${passSignature ?? ""}`, expected),
    ).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONFIG_BAD_SIGNATURE }));
  });

  it("refuses a correctly signed config that the schema rejects, naming the field", () => {
    const payload = canonicalJson({
      v: 1,
      experimentId: EXPERIMENT,
      version: 1,
      issuedAt: NOW,
      config: { ...config, optimizer: { ...config.optimizer, beta1: 1.5 } },
    });
    const signature = crypto.sign(signingBytes(SignatureDomain.config, payload), authority.secretKey);
    const signed = `${toBase64Url(payload)}.${toBase64Url(signature)}`;
    const verify = () => verifyExperimentConfig(crypto, signed, expected);
    expect(verify).toThrow(expect.objectContaining({ code: ProtocolErrorCode.CONFIG_INVALID }));
    expect(verify).toThrow(/optimizer\.beta1: /);
  });
});
