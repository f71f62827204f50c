import { webSockets } from "@libp2p/websockets";
import { fromBase64Url } from "@barnraise/protocol";
import { pino } from "pino";
import { SwarmNode } from "../../src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { echoMethod } from "./echo-method.ts";

/**
 * A swarm node in a web page, for the browser tests: bundled for the browser with esbuild and
 * driven through `globalThis.browserNode`. It runs on WebSockets alone, in client mode, as a
 * volunteer's tab does.
 */

export interface BrowserNodeInit {
  readonly experimentId: string;
  readonly authorityPublicKey: string;
  readonly publicKey: string;
  readonly secretKey: string;
  readonly pass: string;
  readonly bootstrap: string;
}

let node: SwarmNode | undefined;

const browserNode = {
  async start(init: BrowserNodeInit): Promise<string> {
    node = await SwarmNode.create({
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
      transports: [webSockets()],
      listen: [],
      bootstrap: [init.bootstrap],
      logger: pino({ level: "silent" }),
    });
    node.rpc.handle(echoMethod, async (incoming) => {
      await incoming.respond({ text: incoming.head.text, username: incoming.from.pass.username });
    });
    await node.start();
    return node.peerId;
  },
  members(): string[] {
    return node?.members() ?? [];
  },
  modeOf(peer: string): string | undefined {
    return node?.modeOf(peer);
  },
  async echo(peer: string, text: string): Promise<{ text: string; username: string }> {
    if (node === undefined) throw new Error("not started");
    return node.rpc.request(peer, echoMethod, { text });
  },
  async stop(): Promise<void> {
    await node?.stop();
  },
};

export type BrowserNode = typeof browserNode;

(globalThis as { browserNode?: BrowserNode }).browserNode = browserNode;
