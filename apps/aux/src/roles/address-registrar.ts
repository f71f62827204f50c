import type { Logger } from "pino";
import { describeError } from "../describe-error.ts";
import type { AuxPlatformClient } from "../platform-client.ts";

/** Re-register the address this often: join responses list aux peers seen in the last 10 minutes. */
const REGISTER_EVERY_MS = 4 * 60_000;
/** Wait after a failed registration. */
const RETRY_MS = 5_000;

/** Keeps the aux's addresses registered with the platform, so that join responses list it. */
export class AddressRegistrar {
  readonly #client: AuxPlatformClient;
  readonly #addresses: readonly string[];
  readonly #logger: Logger;
  #registeredAt = -Infinity;

  constructor(client: AuxPlatformClient, addresses: readonly string[], logger: Logger) {
    this.#client = client;
    this.#addresses = addresses;
    this.#logger = logger;
  }

  /** Registers the addresses when it is time; a failure is logged and tried again soon. */
  async tick(now: number, signal: AbortSignal): Promise<void> {
    if (now - this.#registeredAt < REGISTER_EVERY_MS || this.#addresses.length === 0) return;
    this.#registeredAt = now;
    try {
      await this.#client.registerAddress(this.#addresses, signal);
      this.#logger.info({ multiaddrs: this.#addresses }, "registered address");
    } catch (error) {
      if (signal.aborted) return;
      this.#registeredAt = now - REGISTER_EVERY_MS + RETRY_MS;
      this.#logger.warn({ err: error }, `could not register the address: ${describeError(error)}`);
    }
  }
}
