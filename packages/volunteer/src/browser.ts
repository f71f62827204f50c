/**
 * What the volunteer's run needs of a browser: the runtime a tab's Web Worker gives `runVolunteer`.
 * The run itself is `@barnraise/volunteer`.
 */
export * from "./browser/browser-runtime.ts";
export { forgetIndexedDbNode as forgetBrowserNode } from "@barnraise/swarm/browser";
export * from "./browser/tab-outcome.ts";
export { installWorkerRtc } from "@barnraise/swarm/browser";
