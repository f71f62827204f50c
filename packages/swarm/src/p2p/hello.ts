import { z } from "zod";
import { defineMethod } from "../rpc/rpc.ts";

export const AveragingModeSchema = z.enum(["node", "client", "aux"]);
export type AveragingMode = z.infer<typeof AveragingModeSchema>;

const multiaddrText = z.string().min(1).max(512);
const peerEntry = z.strictObject({
  peerId: z.string().min(1).max(128),
  addrs: z.array(multiaddrText).max(16),
});

/** The largest number of other members a hello answer lists. */
export const HELLO_MAX_PEERS = 64;

/**
 * The first exchange on every new connection. The signed request and response carry both
 * passes, so afterwards each side admits the other (`PeerAuthorizer`); the answer also lists
 * other admitted members with their addresses, which is how a new peer finds the whole swarm
 * from one bootstrap address.
 */
export const helloMethod = defineMethod({
  name: "hello",
  request: z.strictObject({ mode: AveragingModeSchema, addrs: z.array(multiaddrText).max(16) }),
  response: z.strictObject({
    mode: AveragingModeSchema,
    addrs: z.array(multiaddrText).max(16),
    peers: z.array(peerEntry).max(HELLO_MAX_PEERS),
  }),
  maxFrameBytes: 0,
});
