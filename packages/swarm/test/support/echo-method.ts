import { z } from "zod";
import { defineMethod } from "../../src/rpc/rpc.ts";

/** A test RPC: answers the text with the caller's username, as the signed request names it. */
export const echoMethod = defineMethod({
  name: "echo",
  request: z.strictObject({ text: z.string().max(100) }),
  response: z.strictObject({ text: z.string(), username: z.string() }),
  maxFrameBytes: 1 << 16,
});
