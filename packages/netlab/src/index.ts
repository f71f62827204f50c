/**
 * @barnraise/netlab: hosts in Linux network namespaces, joined by bridges, with links shaped by tc.
 * For network-namespace tests (peers that can only meet through a relay) and bandwidth benchmarks.
 * Needs root, iproute2 (`ip`, `tc`) and Linux.
 */
export { NetLab, type AddHostOptions, type AddNatRouterOptions, type AddRouterOptions } from "./net-lab.ts";
export type { LinkOptions } from "./link-options.ts";
export { Host, type HostExecOptions, type HostSpawnOptions } from "./host.ts";
export { netlabAvailable, netemAvailable, type NetLabAvailability } from "./availability.ts";
export { NetLabError, NetLabErrorCode } from "./errors.ts";
export type { ProcessResult } from "./run-command.ts";
export { waitForExit, watchJsonLines, type ChildOutcome, type JsonLineWatch } from "./child-output.ts";
export {
  payloadBytesPerSecond,
  shapingCommands,
  tbfParameters,
  TCP_GOODPUT_PER_RATE,
  type LinkShape,
  type TbfParameters,
} from "./tc-shaping.ts";
