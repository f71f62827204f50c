import { fromBase64Url } from "@barnraise/protocol";
import { pino } from "pino";
import type { SwarmTransports } from "../../src/p2p/swarm-node-options.ts";
import { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { echoMethod } from "./echo-method.ts";

/** What a test hands a browser's node: its experiment, keys, pass and the node to join through. */
export interface BrowserNodeInit {
  readonly experimentId: string;
  readonly authorityPublicKey: string;
  readonly publicKey: string;
  readonly secretKey: string;
  readonly pass: string;
  readonly bootstrap: string;
}

/**
 * A swarm node as a volunteer's tab runs it (client mode, listening on nothing) on `transports`,
 * answering `echoMethod`; not started.
 */
export async function createTabNode(init: BrowserNodeInit, transports: SwarmTransports): Promise<SwarmNode> {
  const node = await SwarmNode.create({
    experimentId: init.experimentId,
    identity: {
      publicKey: fromBase64Url(init.publicKey, "public key"),
      secretKey: fromBase64Url(init.secretKey, "secret key"),
    },
    authority: new AuthorityKeys({
      experimentId: init.experimentId,
      publicKey: fromBase64Url(init.authorityPublicKey, "authority key"),
    }),
    pass: init.pass,
    refreshPass: () => Promise.resolve(init.pass),
    mode: "client",
    transports,
    listen: [],
    bootstrap: [init.bootstrap],
    logger: pino({ level: "silent" }),
  });
  node.rpc.handle(echoMethod, async (incoming) => {
    await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
  });
  return node;
}
