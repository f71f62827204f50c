import type { RpcFrameStream } from "../../src/rpc/rpc.ts";

/**
 * `stream` with the last float32 of every frame it writes set to NaN: a sender whose all-reduce
 * chunks are not finite. With `quietWhenRefused`, a read that fails (the reducer refused it) never
 * settles instead of rejecting, so the sender keeps its round going as an attacker would.
 */
export function sendingNaNOn(
  stream: RpcFrameStream,
  options: { quietWhenRefused?: boolean } = {},
): RpcFrameStream {
  return {
    read: (readOptions) =>
      options.quietWhenRefused === true
        ? stream.read(readOptions).catch(() => new Promise<never>(() => undefined))
        : stream.read(readOptions),
    write: (frame, writeOptions) => {
      const spoilt = frame.slice();
      new DataView(spoilt.buffer).setFloat32(spoilt.length - 4, Number.NaN, true);
      return stream.write(spoilt, writeOptions);
    },
    closeWrite: () => stream.closeWrite(),
    abort: (reason) => {
      stream.abort(reason);
    },
  };
}
