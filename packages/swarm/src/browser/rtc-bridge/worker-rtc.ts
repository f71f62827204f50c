import {
  isPageRtcMessage,
  plainDescription,
  type ChannelView,
  type ConnectionView,
  type PageRtcMessage,
  type RtcHandle,
  type WorkerRtcMessage,
} from "./rtc-bridge-messages.ts";

/** What the worker needs of its scope: its own `postMessage` and message events. */
export interface RtcPagePort {
  postMessage(message: unknown, transfer?: Transferable[]): void;
  addEventListener(type: "message", listener: (event: MessageEvent) => void): void;
}

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/**
 * Gives a Web Worker `RTCPeerConnection`, `RTCSessionDescription` and `RTCIceCandidate` where the
 * browser does not (it exposes them to windows only): stand-ins that ask the page, which must run
 * `hostWorkerRtc` for this worker. They cover what libp2p's WebRTC transports use: certificates, an
 * offer and answer, ICE candidates, connection states, and data channels with their buffering.
 * Call it before `browserTransports()`, which offers WebRTC-direct only where it finds
 * `RTCPeerConnection` (libp2p's browser-to-browser WebRTC, which Barnraise does not use, would read
 * the other two when its module loads). Returns false, changing nothing, where the scope has
 * `RTCPeerConnection` already. A call the page never answers (a page without the host) leaves the
 * dial to libp2p's per-address timeout, and the node reaches that peer another way.
 */
export function installWorkerRtc(scope: RtcPagePort = globalThis as unknown as RtcPagePort): boolean {
  const global = globalThis as unknown as Record<string, unknown>;
  if (typeof global.RTCPeerConnection === "function") return false;
  const bridge = new WorkerRtcBridge(scope);
  global.RTCPeerConnection = peerConnectionClass(bridge);
  global.RTCSessionDescription = SessionDescription;
  global.RTCIceCandidate = IceCandidate;
  return true;
}

/** A certificate the page made and holds, as the worker names it. */
class CertificateHandle {
  readonly handle: RtcHandle;
  readonly expires: number;
  constructor(handle: RtcHandle, expires: number) {
    this.handle = handle;
    this.expires = expires;
  }
}

class SessionDescription {
  readonly type: RTCSdpType;
  readonly sdp: string;
  constructor(init: RTCSessionDescriptionInit) {
    this.type = init.type;
    this.sdp = init.sdp ?? "";
  }
  toJSON(): RTCSessionDescriptionInit {
    return { type: this.type, sdp: this.sdp };
  }
}

class IceCandidate {
  readonly candidate: string;
  readonly sdpMid: string | null;
  readonly sdpMLineIndex: number | null;
  readonly usernameFragment: string | null;
  constructor(init: RTCIceCandidateInit = {}) {
    this.candidate = init.candidate ?? "";
    this.sdpMid = init.sdpMid ?? null;
    this.sdpMLineIndex = init.sdpMLineIndex ?? null;
    this.usernameFragment = init.usernameFragment ?? null;
  }
  toJSON(): RTCIceCandidateInit {
    return {
      candidate: this.candidate,
      sdpMid: this.sdpMid,
      sdpMLineIndex: this.sdpMLineIndex,
      usernameFragment: this.usernameFragment,
    };
  }
}

/** Calls `on<type>` after the listeners, as a browser's event handler attributes are called. */
function fire(target: EventTarget, event: Event): void {
  target.dispatchEvent(event);
  const handler = (target as unknown as Record<string, unknown>)[`on${event.type}`];
  if (typeof handler === "function") (handler as (event: Event) => void).call(target, event);
}

function withFields<T extends object>(event: Event, fields: T): Event & T {
  return Object.assign(event, fields);
}

class WorkerRtcBridge {
  readonly #scope: RtcPagePort;
  readonly #pending = new Map<number, Pending>();
  readonly #connections = new Map<RtcHandle, BridgedPeerConnection>();
  readonly #channels = new Map<RtcHandle, BridgedDataChannel>();
  #nextCall = 1;
  #nextHandle = 1;

  constructor(scope: RtcPagePort) {
    this.#scope = scope;
    scope.addEventListener("message", ({ data }) => {
      if (isPageRtcMessage(data)) this.#receive(data);
    });
  }

  post(message: WorkerRtcMessage, transfer: Transferable[] = []): void {
    this.#scope.postMessage(message, transfer);
  }

  /** Asks the page, and resolves with its answer. */
  ask(message: (call: number) => WorkerRtcMessage): Promise<unknown> {
    const call = this.#nextCall++;
    const { promise, resolve, reject } = Promise.withResolvers<unknown>();
    this.#pending.set(call, { resolve, reject });
    this.post(message(call));
    return promise;
  }

  handle(): RtcHandle {
    return this.#nextHandle++;
  }

  addConnection(pc: RtcHandle, connection: BridgedPeerConnection): void {
    this.#connections.set(pc, connection);
  }

  dropConnection(pc: RtcHandle): void {
    this.#connections.delete(pc);
  }

  addChannel(handle: RtcHandle, channel: BridgedDataChannel): void {
    this.#channels.set(handle, channel);
  }

  dropChannel(handle: RtcHandle): void {
    this.#channels.delete(handle);
  }

  #receive(message: PageRtcMessage): void {
    switch (message.op) {
      case "answer": {
        const pending = this.#pending.get(message.call);
        this.#pending.delete(message.call);
        if (message.error !== undefined) pending?.reject(new Error(message.error));
        else pending?.resolve(message.value);
        break;
      }
      case "state":
        this.#connections.get(message.pc)?.observe(message.view, message.event);
        break;
      case "ice":
        this.#connections.get(message.pc)?.iceCandidate(message.candidate);
        break;
      case "incoming": {
        const connection = this.#connections.get(message.pc);
        if (connection === undefined) break;
        const channel = new BridgedDataChannel(this, message.channel, message.view);
        this.addChannel(message.channel, channel);
        connection.incoming(channel);
        break;
      }
      case "channel-state":
        this.#channels.get(message.channel)?.observe(message.view, message.bufferedAmount);
        break;
      case "message":
        this.#channels.get(message.channel)?.message(message.data);
        break;
      case "buffered":
        this.#channels.get(message.channel)?.buffered(message.sent, message.bufferedAmount, message.low);
        break;
      case "channel-error":
        this.#channels.get(message.channel)?.error(message.message);
        break;
    }
  }
}

/** The `RTCPeerConnection` class of the worker: stand-ins that `bridge` connects to the page. */
function peerConnectionClass(bridge: WorkerRtcBridge): typeof RTCPeerConnection {
  class PeerConnection extends BridgedPeerConnection {
    constructor(configuration: RTCConfiguration = {}) {
      super(bridge, configuration);
    }
    static async generateCertificate(algorithm: AlgorithmIdentifier): Promise<RTCCertificate> {
      const made = (await bridge.ask((call) => ({
        barnraiseRtc: 1,
        op: "certificate",
        call,
        algorithm,
      }))) as {
        handle: RtcHandle;
        expires: number;
      };
      return new CertificateHandle(made.handle, made.expires) as unknown as RTCCertificate;
    }
  }
  return PeerConnection as unknown as typeof RTCPeerConnection;
}

class BridgedPeerConnection extends EventTarget {
  readonly #bridge: WorkerRtcBridge;
  readonly #pc: RtcHandle;
  readonly #channels = new Set<BridgedDataChannel>();
  #view: ConnectionView = {
    connectionState: "new",
    iceConnectionState: "new",
    iceGatheringState: "new",
    signalingState: "stable",
    localDescription: null,
    remoteDescription: null,
  };
  onconnectionstatechange: ((event: Event) => void) | null = null;
  oniceconnectionstatechange: ((event: Event) => void) | null = null;
  onicegatheringstatechange: ((event: Event) => void) | null = null;
  onsignalingstatechange: ((event: Event) => void) | null = null;
  onicecandidate: ((event: Event) => void) | null = null;
  onicecandidateerror: ((event: Event) => void) | null = null;
  ondatachannel: ((event: Event) => void) | null = null;
  onnegotiationneeded: ((event: Event) => void) | null = null;

  constructor(bridge: WorkerRtcBridge, configuration: RTCConfiguration) {
    super();
    this.#bridge = bridge;
    this.#pc = bridge.handle();
    bridge.addConnection(this.#pc, this);
    const { certificates = [], ...rest } = configuration;
    bridge.post({
      barnraiseRtc: 1,
      op: "open",
      pc: this.#pc,
      configuration: rest,
      certificates: certificates.flatMap((certificate) =>
        certificate instanceof CertificateHandle ? [certificate.handle] : [],
      ),
    });
  }

  get connectionState(): RTCPeerConnectionState {
    return this.#view.connectionState;
  }
  get iceConnectionState(): RTCIceConnectionState {
    return this.#view.iceConnectionState;
  }
  get iceGatheringState(): RTCIceGatheringState {
    return this.#view.iceGatheringState;
  }
  get signalingState(): RTCSignalingState {
    return this.#view.signalingState;
  }
  get localDescription(): SessionDescription | null {
    const { localDescription } = this.#view;
    return localDescription === null ? null : new SessionDescription(localDescription);
  }
  get remoteDescription(): SessionDescription | null {
    const { remoteDescription } = this.#view;
    return remoteDescription === null ? null : new SessionDescription(remoteDescription);
  }

  createOffer(): Promise<RTCSessionDescriptionInit> {
    return this.#call("createOffer") as Promise<RTCSessionDescriptionInit>;
  }
  createAnswer(): Promise<RTCSessionDescriptionInit> {
    return this.#call("createAnswer") as Promise<RTCSessionDescriptionInit>;
  }
  async setLocalDescription(description?: RTCSessionDescriptionInit): Promise<void> {
    await this.#call("setLocalDescription", description === undefined ? null : plainDescription(description));
  }
  async setRemoteDescription(description: RTCSessionDescriptionInit): Promise<void> {
    await this.#call("setRemoteDescription", plainDescription(description));
  }
  async addIceCandidate(candidate?: RTCIceCandidateInit | null): Promise<void> {
    const init = candidate === undefined || candidate === null ? null : new IceCandidate(candidate).toJSON();
    await this.#call("addIceCandidate", init);
  }

  createDataChannel(label: string, init: RTCDataChannelInit = {}): BridgedDataChannel {
    if (this.#view.connectionState === "closed") {
      throw new DOMException("The peer connection is closed", "InvalidStateError");
    }
    const handle = this.#bridge.handle();
    const channel = new BridgedDataChannel(this.#bridge, handle, {
      label,
      protocol: init.protocol ?? "",
      id: init.negotiated === true ? (init.id ?? null) : null,
      ordered: init.ordered ?? true,
      negotiated: init.negotiated ?? false,
      readyState: "connecting",
    });
    this.#bridge.addChannel(handle, channel);
    this.#channels.add(channel);
    this.#bridge.post({ barnraiseRtc: 1, op: "channel", pc: this.#pc, channel: handle, label, init });
    return channel;
  }

  /** Closes the connection and its channels at once, as a browser's `close()` does (no events). */
  close(): void {
    if (this.#view.connectionState === "closed") return;
    this.#view = {
      ...this.#view,
      connectionState: "closed",
      iceConnectionState: "closed",
      signalingState: "closed",
    };
    this.#bridge.post({ barnraiseRtc: 1, op: "close", pc: this.#pc });
    this.#bridge.dropConnection(this.#pc);
    for (const channel of this.#channels) channel.closedWithConnection();
    this.#channels.clear();
  }

  observe(view: ConnectionView, event: string): void {
    if (this.#view.connectionState === "closed") return;
    this.#view = view;
    fire(this, new Event(event));
  }

  iceCandidate(candidate: RTCIceCandidateInit | null): void {
    fire(
      this,
      withFields(new Event("icecandidate"), {
        candidate: candidate === null ? null : new IceCandidate(candidate),
      }),
    );
  }

  incoming(channel: BridgedDataChannel): void {
    this.#channels.add(channel);
    fire(this, withFields(new Event("datachannel"), { channel }));
  }

  async #call(
    method: Extract<WorkerRtcMessage, { op: "call" }>["method"],
    argument?: RTCSessionDescriptionInit | RTCIceCandidateInit | null,
  ): Promise<unknown> {
    const answer = (await this.#bridge.ask((call) => ({
      barnraiseRtc: 1,
      op: "call",
      pc: this.#pc,
      call,
      method,
      ...(argument === undefined ? {} : { argument }),
    }))) as { result: unknown; view: ConnectionView };
    if (this.#view.connectionState !== "closed") this.#view = answer.view;
    return answer.result;
  }
}

/**
 * A data channel held by the page. `bufferedAmount` is what the page's channel had buffered at its
 * last report, plus the bytes sent since that the page has not taken yet: never less than the real
 * amount, so a sender that waits for it to fall waits long enough.
 */
class BridgedDataChannel extends EventTarget {
  readonly #bridge: WorkerRtcBridge;
  readonly #handle: RtcHandle;
  #view: ChannelView;
  #reported = 0;
  #inFlight = 0;
  #threshold = 0;
  binaryType: BinaryType = "arraybuffer";
  onopen: ((event: Event) => void) | null = null;
  onclose: ((event: Event) => void) | null = null;
  onclosing: ((event: Event) => void) | null = null;
  onerror: ((event: Event) => void) | null = null;
  onmessage: ((event: MessageEvent) => void) | null = null;
  onbufferedamountlow: ((event: Event) => void) | null = null;

  constructor(bridge: WorkerRtcBridge, handle: RtcHandle, view: ChannelView) {
    super();
    this.#bridge = bridge;
    this.#handle = handle;
    this.#view = view;
  }

  get label(): string {
    return this.#view.label;
  }
  get protocol(): string {
    return this.#view.protocol;
  }
  get id(): number | null {
    return this.#view.id;
  }
  get ordered(): boolean {
    return this.#view.ordered;
  }
  get negotiated(): boolean {
    return this.#view.negotiated;
  }
  get readyState(): RTCDataChannelState {
    return this.#view.readyState;
  }
  get bufferedAmount(): number {
    return this.#reported + this.#inFlight;
  }
  get bufferedAmountLowThreshold(): number {
    return this.#threshold;
  }
  set bufferedAmountLowThreshold(bytes: number) {
    this.#threshold = bytes;
    this.#bridge.post({ barnraiseRtc: 1, op: "threshold", channel: this.#handle, bytes });
  }

  send(data: string | ArrayBuffer | ArrayBufferView | Blob): void {
    if (this.#view.readyState !== "open") {
      throw new DOMException(`the data channel is ${this.#view.readyState}`, "InvalidStateError");
    }
    if (typeof data === "string") {
      this.#inFlight += data.length;
      this.#bridge.post({ barnraiseRtc: 1, op: "send", channel: this.#handle, data });
      return;
    }
    if (data instanceof Blob) throw new TypeError("a worker's data channel sends no Blob");
    // A copy of exactly the bytes sent, handed over to the page.
    const bytes =
      data instanceof ArrayBuffer
        ? data.slice(0)
        : (data.buffer as ArrayBuffer).slice(data.byteOffset, data.byteOffset + data.byteLength);
    this.#inFlight += bytes.byteLength;
    this.#bridge.post({ barnraiseRtc: 1, op: "send", channel: this.#handle, data: bytes }, [bytes]);
  }

  close(): void {
    if (this.#view.readyState === "closed" || this.#view.readyState === "closing") return;
    this.#view = { ...this.#view, readyState: "closing" };
    this.#bridge.post({ barnraiseRtc: 1, op: "close-channel", channel: this.#handle });
  }

  observe(view: ChannelView, bufferedAmount: number): void {
    const before = this.#view.readyState;
    this.#view = view;
    this.#reported = bufferedAmount;
    if (view.readyState === before) return;
    if (view.readyState === "closed") this.#bridge.dropChannel(this.#handle);
    if (view.readyState === "open" || view.readyState === "closing" || view.readyState === "closed") {
      fire(
        this,
        new Event(view.readyState === "open" ? "open" : view.readyState === "closing" ? "closing" : "close"),
      );
    }
  }

  message(data: ArrayBuffer | string): void {
    fire(this, new MessageEvent("message", { data }));
  }

  buffered(sent: number, bufferedAmount: number, low: boolean): void {
    this.#inFlight = Math.max(0, this.#inFlight - sent);
    this.#reported = bufferedAmount;
    if (low && this.bufferedAmount <= this.#threshold) fire(this, new Event("bufferedamountlow"));
  }

  error(message: string): void {
    fire(this, withFields(new Event("error"), { error: new Error(message) }));
  }

  /** Its connection closed: closed now, as a browser's channels are when their connection closes. */
  closedWithConnection(): void {
    if (this.#view.readyState === "closed") return;
    this.#view = { ...this.#view, readyState: "closed" };
    this.#bridge.dropChannel(this.#handle);
    fire(this, new Event("close"));
  }
}
