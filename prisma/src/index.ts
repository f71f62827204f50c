export * from "./client.ts";
export * from "./nonce-store.ts";
