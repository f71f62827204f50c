/**
 * The crypto provider of Node.js (`node:crypto`), which the "node" export condition of
 * `@barnraise/protocol/runtime-crypto` selects; see `runtime-crypto.ts`.
 */
import type { CryptoProvider } from "./crypto-provider.ts";
import { nodeCrypto } from "./node.ts";

export const runtimeCrypto: CryptoProvider = nodeCrypto;
