import { z } from "zod";
import type { CryptoProvider } from "./crypto-provider.ts";
import { ProtocolError, ProtocolErrorCode } from "./errors.ts";
import { parseExperimentConfig, type ExperimentConfig } from "./experiment-config.ts";
import { experimentIdSchema, timestampSchema } from "./fields.ts";
import type { KeyPair } from "./keys.ts";
import { openToken, sealToken, SignatureDomain, verifyTokenSignature } from "./signed-message.ts";

export const MAX_CONFIG_TOKEN_LENGTH = 64 * 1024;

const configPayloadSchema = z.strictObject({
  v: z.literal(1),
  experimentId: experimentIdSchema,
  version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  issuedAt: timestampSchema,
  // Checked against the experiment config schema after the signature, with its own messages.
  config: z.record(z.string(), z.unknown()),
});

export interface SignedConfig {
  readonly experimentId: string;
  /** Increases each time the organizer changes the config. */
  readonly version: number;
  readonly issuedAt: number;
  readonly config: ExperimentConfig;
  readonly token: string;
}

export interface SignConfigInit {
  experimentId: string;
  version: number;
  issuedAt: number;
  config: ExperimentConfig;
}

/** Signs a complete experiment config with the authority key. Returns the compact token. */
export function signExperimentConfig(
  crypto: CryptoProvider,
  authority: KeyPair,
  init: SignConfigInit,
): string {
  // Sign the normalized form, so every peer reads the same complete config.
  const config = parseExperimentConfig(init.config);
  const payload = {
    v: 1,
    experimentId: init.experimentId,
    version: init.version,
    issuedAt: init.issuedAt,
    config,
  };
  configPayloadSchema.parse(payload);
  return sealToken(crypto, SignatureDomain.config, payload, authority.secretKey);
}

/** A peer refuses to train on a config that this does not accept. */
export function verifyExperimentConfig(
  crypto: CryptoProvider,
  token: unknown,
  expected: { authorityPublicKey: Uint8Array; experimentId: string },
): SignedConfig {
  const opened = openToken(token, configPayloadSchema, MAX_CONFIG_TOKEN_LENGTH, "signed config");
  if (!verifyTokenSignature(crypto, SignatureDomain.config, opened, expected.authorityPublicKey)) {
    throw new ProtocolError(
      ProtocolErrorCode.CONFIG_BAD_SIGNATURE,
      "config is not signed by the experiment's authority",
    );
  }
  if (opened.payload.experimentId !== expected.experimentId) {
    throw new ProtocolError(
      ProtocolErrorCode.CONFIG_WRONG_EXPERIMENT,
      `config is for experiment ${opened.payload.experimentId}, not ${expected.experimentId}`,
    );
  }
  return {
    experimentId: opened.payload.experimentId,
    version: opened.payload.version,
    issuedAt: opened.payload.issuedAt,
    config: parseExperimentConfig(opened.payload.config),
    token: token as string,
  };
}
