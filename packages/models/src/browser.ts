/**
 * What the models need of a browser: its TF.js backends, and IndexedDB for the caches. The models
 * themselves are `@barnraise/models`.
 */
export * from "./browser/browser-backends.ts";
export * from "./browser/indexeddb-blob-store.ts";
