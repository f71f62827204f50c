import type { PeerRole } from "@barnraise/protocol";
import { z } from "zod";
import { SwarmError, SwarmErrorCode } from "../errors.ts";
import { defineMethod } from "../rpc/rpc.ts";

export const AveragingModeSchema = z.enum(["node", "client", "aux"]);
export type AveragingMode = z.infer<typeof AveragingModeSchema>;

const multiaddrText = z.string().min(1).max(512);
const peerEntry = z.strictObject({
  peerId: z.string().min(1).max(128),
  addrs: z.array(multiaddrText).max(16),
});

/**
 * Refuses (UNAUTHORIZED_PEER) a mode that does not fit the role of the pass it came with: aux mode
 * is an aux pass's, and an aux pass takes part in aux mode only (in node or client mode it would be
 * planned into rounds as a trainer). The hello, matchmaking and progress records all apply it.
 */
export function checkModeFitsRole(mode: AveragingMode, role: PeerRole, what: string): void {
  if ((mode === "aux") === (role === "aux")) return;
  throw new SwarmError(
    SwarmErrorCode.UNAUTHORIZED_PEER,
    role === "aux"
      ? `${what} in ${mode} mode from an aux pass: an aux takes part in aux mode only`
      : `${what} in aux mode from a ${role} pass: only aux passes may take part in aux mode`,
  );
}

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
