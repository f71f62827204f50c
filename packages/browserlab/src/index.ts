export * from "./browser-lab.ts";
