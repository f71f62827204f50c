import { describe, expect, it } from "vitest";
import { z } from "zod";
import { defineMethod } from "../src/rpc/rpc.ts";
import { at } from "./support/at.ts";
import { MemoryRpcNetwork } from "./support/memory-rpc.ts";

const echo = defineMethod({
  name: "echo",
  request: z.strictObject({ n: z.number().int() }),
  response: z.strictObject({ n: z.number().int() }),
  maxFrameBytes: 1024,
});

describe("MemoryRpcNetwork (test fake)", () => {
  it("runs a streamed exchange with backpressure and end of stream", async () => {
    const network = new MemoryRpcNetwork();
    const a = network.add("a");
    const b = network.add("b");
    b.handle(echo, async (incoming) => {
      const stream = await incoming.respond({ n: incoming.head.n + 1 });
      for (let frame = await stream.read(); frame !== null; frame = await stream.read())
        await stream.write(frame);
      await stream.closeWrite();
    });
    const { head, stream, from } = await a.call("b", echo, { n: 1 });
    expect(head).toEqual({ n: 2 });
    expect(from.peerId).toBe("b");
    const sent = Array.from({ length: 20 }, (_, i) => new Uint8Array([i]));
    const writing = (async () => {
      for (const frame of sent) await stream.write(frame);
      await stream.closeWrite();
    })();
    const got: number[] = [];
    for (let frame = await stream.read(); frame !== null; frame = await stream.read()) got.push(at(frame, 0));
    await writing;
    expect(got).toEqual(sent.map((f) => f[0]));
  });

  it("refuses a head that does not match the schema, and breaks streams of a killed peer", async () => {
    const network = new MemoryRpcNetwork();
    const a = network.add("a");
    const b = network.add("b");
    b.handle(echo, async (incoming) => {
      const stream = await incoming.respond({ n: 0 });
      await stream.read();
    });
    await expect(a.call("b", echo, { n: 1.5 })).rejects.toMatchObject({ code: "MALFORMED_MESSAGE" });
    const { stream } = await a.call("b", echo, { n: 1 });
    network.kill("b");
    await expect(stream.read()).rejects.toMatchObject({ code: "PEER_UNREACHABLE" });
    await expect(a.call("b", echo, { n: 1 })).rejects.toMatchObject({ code: "PEER_UNREACHABLE" });
  });
});
