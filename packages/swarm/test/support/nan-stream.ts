import { refusalOf } from "../../src/averaging/allreduce-messages.ts";
import type { RpcFrameStream } from "../../src/rpc/rpc.ts";

/**
 * `stream` with the last float32 of every frame it writes set to NaN: a sender whose all-reduce
 * chunks are not finite. With `quietWhenRefused`, a read that brings the reducer's refusal or
 * fails never settles instead, so the sender keeps its round going as an attacker would (and
 * never withdraws its other uploads, so every reducer sees its NaN).
 */
export function sendingNaNOn(
  stream: RpcFrameStream,
  options: { quietWhenRefused?: boolean } = {},
): RpcFrameStream {
  const never = () => new Promise<never>(() => undefined);
  return {
    read: (readOptions) =>
      options.quietWhenRefused === true
        ? stream
            .read(readOptions)
            .then((frame) => (frame !== null && refusalOf(frame) !== undefined ? never() : frame), never)
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
