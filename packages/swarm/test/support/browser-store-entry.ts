import { fromBase64Url, toBase64Url } from "@barnraise/protocol";
import { set, createStore } from "idb-keyval";
import { forgetIndexedDbNode, indexedDbNodeStore } from "../../src/browser/indexeddb-node-store.ts";

/** The browser's node store in a web page, for the browser tests (`globalThis.browserStore`). */
const browserStore = {
  async identity(name: string): Promise<{ peerId: string; created: boolean; publicKey: string }> {
    const identity = await indexedDbNodeStore(name).loadOrCreateIdentity();
    return {
      peerId: identity.peerId,
      created: identity.created,
      publicKey: toBase64Url(identity.keyPair.publicKey),
    };
  },
  async identities(name: string, count: number): Promise<Array<{ peerId: string; created: boolean }>> {
    const store = indexedDbNodeStore(name);
    const all = await Promise.all(Array.from({ length: count }, () => store.loadOrCreateIdentity()));
    return all.map((identity) => ({ peerId: identity.peerId, created: identity.created }));
  },
  async savePin(name: string, experimentId: string, authorityPublicKey: string): Promise<void> {
    await indexedDbNodeStore(name).pins.save({
      experimentId,
      authorityPublicKey: fromBase64Url(authorityPublicKey, "authority key"),
    });
  },
  async loadPin(name: string): Promise<{ experimentId: string; authorityPublicKey: string } | undefined> {
    const pin = await indexedDbNodeStore(name).pins.load();
    return pin === undefined
      ? undefined
      : { experimentId: pin.experimentId, authorityPublicKey: toBase64Url(pin.authorityPublicKey) };
  },
  async forget(name: string): Promise<void> {
    await forgetIndexedDbNode(name);
  },
  /** Writes `value` where the identity is kept, as another program or a damaged profile might. */
  async corrupt(name: string, value: unknown): Promise<void> {
    await set("identity", value, createStore(`barnraise-node-${name}`, "node"));
  },
};

export type BrowserStore = typeof browserStore;

(globalThis as { browserStore?: BrowserStore }).browserStore = browserStore;
