/**
 * What a Web Worker and its page say to each other to give the worker WebRTC. Browsers expose
 * `RTCPeerConnection` to windows only (Chromium and Firefox, 2026), while a volunteer's node runs
 * in a worker so that training never blocks the page. The page holds the real peer connections and
 * data channels (`hostWorkerRtc`); the worker gets stand-ins with the same API
 * (`installWorkerRtc`), each call and event a message. Every message carries `barnraiseRtc`, so
 * that both sides tell them from their other messages.
 */

/**
 * A peer connection, data channel or certificate, by a number its side gave it (a page's channels
 * are negative). Certificates stay on the page: a worker cannot hold an `RTCCertificate`.
 */
export type RtcHandle = number;

/** The state of a data channel the worker mirrors. */
export interface ChannelView {
  readonly label: string;
  readonly protocol: string;
  readonly id: number | null;
  readonly ordered: boolean;
  readonly negotiated: boolean;
  readonly readyState: RTCDataChannelState;
}

/** The description and states a peer connection's worker stand-in mirrors after each change. */
export interface ConnectionView {
  readonly connectionState: RTCPeerConnectionState;
  readonly iceConnectionState: RTCIceConnectionState;
  readonly iceGatheringState: RTCIceGatheringState;
  readonly signalingState: RTCSignalingState;
  readonly localDescription: RTCSessionDescriptionInit | null;
  readonly remoteDescription: RTCSessionDescriptionInit | null;
}

/** The worker's calls. `call` numbers those that are answered. */
export type WorkerRtcMessage = { readonly barnraiseRtc: 1 } & (
  | { readonly op: "certificate"; readonly call: number; readonly algorithm: AlgorithmIdentifier }
  | {
      readonly op: "open";
      readonly pc: RtcHandle;
      /** Without certificates: those are named by `certificates`, the handles the page gave them. */
      readonly configuration: RTCConfiguration;
      readonly certificates: readonly RtcHandle[];
    }
  | {
      readonly op: "call";
      readonly pc: RtcHandle;
      readonly call: number;
      readonly method:
        "createOffer" | "createAnswer" | "setLocalDescription" | "setRemoteDescription" | "addIceCandidate";
      readonly argument?: RTCSessionDescriptionInit | RTCIceCandidateInit | null;
    }
  | { readonly op: "close"; readonly pc: RtcHandle }
  | {
      readonly op: "channel";
      readonly pc: RtcHandle;
      readonly channel: RtcHandle;
      readonly label: string;
      readonly init: RTCDataChannelInit;
    }
  | { readonly op: "send"; readonly channel: RtcHandle; readonly data: ArrayBuffer | string }
  | { readonly op: "threshold"; readonly channel: RtcHandle; readonly bytes: number }
  | { readonly op: "close-channel"; readonly channel: RtcHandle }
);

/** The page's answers and events. */
export type PageRtcMessage = { readonly barnraiseRtc: 1 } & (
  | { readonly op: "answer"; readonly call: number; readonly value?: unknown; readonly error?: string }
  | { readonly op: "state"; readonly pc: RtcHandle; readonly view: ConnectionView; readonly event: string }
  | { readonly op: "ice"; readonly pc: RtcHandle; readonly candidate: RTCIceCandidateInit | null }
  | {
      readonly op: "incoming";
      readonly pc: RtcHandle;
      readonly channel: RtcHandle;
      readonly view: ChannelView;
    }
  | {
      readonly op: "channel-state";
      readonly channel: RtcHandle;
      readonly view: ChannelView;
      readonly bufferedAmount: number;
    }
  | { readonly op: "message"; readonly channel: RtcHandle; readonly data: ArrayBuffer | string }
  /** After each send (`sent` bytes taken from the worker's count) and when the buffer ran low. */
  | {
      readonly op: "buffered";
      readonly channel: RtcHandle;
      readonly sent: number;
      readonly bufferedAmount: number;
      readonly low: boolean;
    }
  | { readonly op: "channel-error"; readonly channel: RtcHandle; readonly message: string }
);

function isRtcMessage(data: unknown): boolean {
  return typeof data === "object" && data !== null && (data as { barnraiseRtc?: unknown }).barnraiseRtc === 1;
}

/** A worker's call, as the page receives it (both sides are the platform's own code). */
export function isWorkerRtcMessage(data: unknown): data is WorkerRtcMessage {
  return isRtcMessage(data);
}

/** A page's answer or event, as the worker receives it. */
export function isPageRtcMessage(data: unknown): data is PageRtcMessage {
  return isRtcMessage(data);
}

/** A description as plain data, the form both sides post (a browser's own object does not clone). */
export function plainDescription(description: RTCSessionDescriptionInit): RTCSessionDescriptionInit {
  return { type: description.type, ...(description.sdp === undefined ? {} : { sdp: description.sdp }) };
}
