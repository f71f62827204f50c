/**
 * Node.js entry point: the models (everything `@barnraise/models` exports) and what they need of
 * Node.js: caches in directories, the TF.js backends of Node.js (native TensorFlow, WebGPU on
 * Dawn's Node binding, WebAssembly from the installed package) and the Dawn binding itself.
 */
export * from "./index.ts";
export * from "./node/directory-store.ts";
export * from "./node/node-backends.ts";
export * from "./node/webgpu.ts";
