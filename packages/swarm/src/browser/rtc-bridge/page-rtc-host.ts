import {
  isWorkerRtcMessage,
  plainDescription,
  type ChannelView,
  type ConnectionView,
  type PageRtcMessage,
  type RtcHandle,
  type WorkerRtcMessage,
} from "./rtc-bridge-messages.ts";

/** What the page needs of the worker it serves: a `Worker`, or a stand-in in tests. */
export interface RtcWorkerPort {
  postMessage(message: unknown, transfer?: Transferable[]): void;
  addEventListener(type: "message", listener: (event: MessageEvent) => void): void;
  removeEventListener(type: "message", listener: (event: MessageEvent) => void): void;
}

/**
 * Gives `worker` WebRTC: the page holds the peer connections and data channels the worker's
 * stand-ins (`installWorkerRtc`) ask for, and passes their calls, events and bytes along. Nothing
 * is opened unless the worker asks; everything it opened is closed when the returned function is
 * called (or the page goes away). Does nothing where the page has no `RTCPeerConnection` either.
 */
export function hostWorkerRtc(worker: RtcWorkerPort): () => void {
  const connections = new Map<RtcHandle, RTCPeerConnection>();
  const channels = new Map<RtcHandle, { channel: RTCDataChannel; pc: RtcHandle }>();
  const certificates = new Map<RtcHandle, RTCCertificate>();
  let nextIncoming = -1;
  let nextCertificate = 1;

  const post = (message: PageRtcMessage, transfer: Transferable[] = []) => {
    worker.postMessage(message, transfer);
  };

  const postView = (pc: RtcHandle, connection: RTCPeerConnection, event: string) => {
    post({ barnraiseRtc: 1, op: "state", pc, view: connectionView(connection), event });
  };

  const wireChannel = (handle: RtcHandle, pc: RtcHandle, channel: RTCDataChannel) => {
    channels.set(handle, { channel, pc });
    channel.binaryType = "arraybuffer";
    const postState = () => {
      post({
        barnraiseRtc: 1,
        op: "channel-state",
        channel: handle,
        view: channelView(channel),
        bufferedAmount: channel.bufferedAmount,
      });
    };
    channel.addEventListener("open", postState);
    channel.addEventListener("closing", postState);
    channel.addEventListener("close", () => {
      postState();
      channels.delete(handle);
    });
    channel.addEventListener("error", ({ error }) => {
      post({ barnraiseRtc: 1, op: "channel-error", channel: handle, message: error.message });
    });
    channel.addEventListener("message", ({ data }: MessageEvent<ArrayBuffer | string>) => {
      post({ barnraiseRtc: 1, op: "message", channel: handle, data }, typeof data === "string" ? [] : [data]);
    });
    channel.addEventListener("bufferedamountlow", () => {
      post({
        barnraiseRtc: 1,
        op: "buffered",
        channel: handle,
        sent: 0,
        bufferedAmount: channel.bufferedAmount,
        low: true,
      });
    });
  };

  const open = (pc: RtcHandle, configuration: RTCConfiguration, named: readonly RtcHandle[]) => {
    const held = named.map((handle) => certificates.get(handle)).filter((found) => found !== undefined);
    const connection = new RTCPeerConnection({
      ...configuration,
      ...(held.length > 0 ? { certificates: held } : {}),
    });
    connections.set(pc, connection);
    for (const event of [
      "connectionstatechange",
      "iceconnectionstatechange",
      "icegatheringstatechange",
      "signalingstatechange",
    ]) {
      connection.addEventListener(event, () => {
        postView(pc, connection, event);
      });
    }
    connection.addEventListener("icecandidate", ({ candidate }) => {
      post({ barnraiseRtc: 1, op: "ice", pc, candidate: candidate?.toJSON() ?? null });
    });
    connection.addEventListener("datachannel", ({ channel }) => {
      const handle = nextIncoming--;
      wireChannel(handle, pc, channel);
      post({ barnraiseRtc: 1, op: "incoming", pc, channel: handle, view: channelView(channel) });
    });
  };

  const answer = (call: number, run: () => Promise<unknown>) => {
    run().then(
      (value) => {
        post({ barnraiseRtc: 1, op: "answer", call, value });
      },
      (error: unknown) => {
        post({
          barnraiseRtc: 1,
          op: "answer",
          call,
          error: error instanceof Error ? error.message : String(error),
        });
      },
    );
  };

  const closeConnection = (pc: RtcHandle) => {
    connections.get(pc)?.close();
    connections.delete(pc);
    for (const [handle, entry] of channels) if (entry.pc === pc) channels.delete(handle);
  };

  const handle = (message: WorkerRtcMessage) => {
    switch (message.op) {
      case "certificate":
        answer(message.call, async () => {
          const certificate = await RTCPeerConnection.generateCertificate(message.algorithm);
          const named = nextCertificate++;
          certificates.set(named, certificate);
          return { handle: named, expires: certificate.expires };
        });
        break;
      case "open":
        open(message.pc, message.configuration, message.certificates);
        break;
      case "call": {
        const connection = connections.get(message.pc);
        answer(message.call, async () => {
          if (connection === undefined) throw new Error("the peer connection is closed");
          const result = await callMethod(connection, message.method, message.argument);
          return { result, view: connectionView(connection) };
        });
        break;
      }
      case "close":
        closeConnection(message.pc);
        break;
      case "channel": {
        const connection = connections.get(message.pc);
        if (connection === undefined) break;
        wireChannel(message.channel, message.pc, connection.createDataChannel(message.label, message.init));
        break;
      }
      case "send": {
        const entry = channels.get(message.channel);
        const bytes = typeof message.data === "string" ? message.data.length : message.data.byteLength;
        try {
          if (entry === undefined) throw new Error("the data channel is closed");
          if (typeof message.data === "string") entry.channel.send(message.data);
          else entry.channel.send(message.data);
        } catch (error) {
          post({
            barnraiseRtc: 1,
            op: "channel-error",
            channel: message.channel,
            message: error instanceof Error ? error.message : String(error),
          });
        }
        post({
          barnraiseRtc: 1,
          op: "buffered",
          channel: message.channel,
          sent: bytes,
          bufferedAmount: entry?.channel.bufferedAmount ?? 0,
          low: false,
        });
        break;
      }
      case "threshold": {
        const entry = channels.get(message.channel);
        if (entry !== undefined) entry.channel.bufferedAmountLowThreshold = message.bytes;
        break;
      }
      case "close-channel":
        channels.get(message.channel)?.channel.close();
        break;
    }
  };

  const listener = ({ data }: MessageEvent) => {
    if (isWorkerRtcMessage(data)) handle(data);
  };
  if (typeof RTCPeerConnection !== "function") return () => undefined;
  worker.addEventListener("message", listener);
  return () => {
    worker.removeEventListener("message", listener);
    for (const pc of [...connections.keys()]) closeConnection(pc);
  };
}

function callMethod(
  connection: RTCPeerConnection,
  method: Extract<WorkerRtcMessage, { op: "call" }>["method"],
  argument: RTCSessionDescriptionInit | RTCIceCandidateInit | null | undefined,
): Promise<unknown> {
  switch (method) {
    case "createOffer":
      return connection.createOffer().then(plainDescription);
    case "createAnswer":
      return connection.createAnswer().then(plainDescription);
    case "setLocalDescription":
      return connection.setLocalDescription((argument ?? undefined) as RTCSessionDescriptionInit | undefined);
    case "setRemoteDescription":
      return connection.setRemoteDescription(argument as RTCSessionDescriptionInit);
    case "addIceCandidate":
      return connection.addIceCandidate((argument ?? undefined) as RTCIceCandidateInit | undefined);
  }
}

function connectionView(connection: RTCPeerConnection): ConnectionView {
  const { localDescription, remoteDescription } = connection;
  return {
    connectionState: connection.connectionState,
    iceConnectionState: connection.iceConnectionState,
    iceGatheringState: connection.iceGatheringState,
    signalingState: connection.signalingState,
    localDescription: localDescription === null ? null : plainDescription(localDescription),
    remoteDescription: remoteDescription === null ? null : plainDescription(remoteDescription),
  };
}

function channelView(channel: RTCDataChannel): ChannelView {
  return {
    label: channel.label,
    protocol: channel.protocol,
    id: channel.id,
    ordered: channel.ordered,
    negotiated: channel.negotiated,
    readyState: channel.readyState,
  };
}
