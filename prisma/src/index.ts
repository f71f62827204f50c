export * from "./client.ts";
export * from "./nonce-store.ts";
export * from "./group-commit.ts";
