/**
 * What the page of a volunteer's tab runs beside the worker that trains: WebRTC for the worker,
 * which browsers give windows only. Small on purpose: the page's bundle takes nothing of the run.
 */
export { hostWorkerRtc, type RtcWorkerPort } from "@barnraise/swarm/rtc-host";
