/**
 * What the models need of a browser: its TF.js backends. The models themselves are
 * `@barnraise/models`.
 */
export * from "./browser/browser-backends.ts";
