/** Rows per held-out batch of the digit classifier and uploaded models: milliseconds of work each. */
export const HELD_OUT_BATCH_SIZE = 128;
/**
 * Tokens per held-out batch of a language model. A batch is computed in one go, without a turn of
 * the event loop in between, so it must be short: on wasm the default ALBERT takes about 150 ms for
 * 1024 tokens on one core (and 1.2 s for 128 sentences of 64), time the swarm would wait.
 */
export const HELD_OUT_TOKENS_PER_BATCH = 1024;

/**
 * Activation floats per held-out batch of an uploaded model (4 MiB): whatever its size, a batch
 * stays a short stretch of work on the aux's one event loop.
 */
export const HELD_OUT_ACTIVATIONS_PER_BATCH = 1 << 20;
