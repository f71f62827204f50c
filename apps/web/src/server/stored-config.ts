import { canonicalJson, parseExperimentConfig, type ExperimentConfig } from "@barnraise/protocol";

/**
 * How an experiment's config is stored and read back. It is stored as the canonical JSON (RFC 8785)
 * of the complete config, defaults applied, so equal configs have equal text. It is read through the
 * protocol's schema, which is also the migration: a config stored before a field existed takes its
 * default, and one stored before `model.preset` became `model.kind` reads as the same model.
 */

export function canonicalConfigText(config: ExperimentConfig): string {
  return new TextDecoder().decode(canonicalJson(config));
}

/** The experiment's config as today's schema reads it. */
export function storedConfigOf(experiment: { readonly config: string }): ExperimentConfig {
  return parseExperimentConfig(JSON.parse(experiment.config));
}
