/**
 * The crypto provider of the runtime this code was bundled for: in a browser (and wherever the
 * "node" export condition does not apply), the portable one (tweetnacl and @noble/hashes). Node.js
 * resolves `@barnraise/protocol/runtime-crypto` to `runtime-crypto.node.ts` instead.
 */
import { portableCrypto, type CryptoProvider } from "./crypto-provider.ts";

export const runtimeCrypto: CryptoProvider = portableCrypto;
