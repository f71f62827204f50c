import { keyPairFromSecretKey, peerIdFromEd25519PublicKey, generateKeyPair } from "@barnraise/protocol";
import { createStore, delMany, get, set, update } from "idb-keyval";
import { z } from "zod";
import type { Identity, NodeStore } from "../identity.ts";
import type { AuthorityPin } from "../platform/authority-pin.ts";

/**
 * A browser's node store (see `NodeStore`): the node's identity and its authority pin in IndexedDB,
 * in a database of their own (`barnraise-node-<name>`). IndexedDB belongs to the page's origin (the
 * platform's): no other site's page can read the key. The identity is created in one transaction,
 * so two tabs opening at once end with one key.
 */

const IDENTITY = "identity";
const PIN = "authority-pin";

const bytes = (length: number) => z.instanceof(Uint8Array).refine((value) => value.length === length);
const identityRecord = z.strictObject({ version: z.literal(1), secretKey: bytes(64) });
const pinRecord = z.strictObject({
  version: z.literal(1),
  experimentId: z.string().min(1).max(256),
  authorityPublicKey: bytes(32),
  pinnedAt: z.string(),
});

export class BrowserStoreError extends Error {
  override readonly name = "BrowserStoreError";
}

/** The node store of database `barnraise-node-<name>` (one per user and experiment, say). */
export function indexedDbNodeStore(name: string): NodeStore {
  const database = `barnraise-node-${name}`;
  const store = nodeDatabase(name);
  return {
    location: `IndexedDB ${database}`,
    async loadOrCreateIdentity(): Promise<Identity> {
      const fresh = generateKeyPair();
      let created = false;
      await update(
        IDENTITY,
        (old) => {
          if (old !== undefined) return old as unknown;
          created = true;
          return { version: 1, secretKey: fresh.secretKey };
        },
        store,
      );
      const parsed = identityRecord.safeParse(await get(IDENTITY, store));
      if (!parsed.success) {
        throw new BrowserStoreError(
          `${database} holds no valid identity; clear this site's data to start anew`,
        );
      }
      const keyPair = keyPairFromSecretKey(parsed.data.secretKey);
      return { keyPair, peerId: peerIdFromEd25519PublicKey(keyPair.publicKey).toString(), created };
    },
    pins: {
      location: `IndexedDB ${database} (${PIN})`,
      async load(): Promise<AuthorityPin | undefined> {
        const record: unknown = await get(PIN, store);
        if (record === undefined) return undefined;
        const parsed = pinRecord.safeParse(record);
        if (!parsed.success) {
          throw new BrowserStoreError(
            `${database} holds no valid authority pin; clear this site's data to pin anew`,
          );
        }
        return { experimentId: parsed.data.experimentId, authorityPublicKey: parsed.data.authorityPublicKey };
      },
      async save(pin: AuthorityPin): Promise<void> {
        await set(
          PIN,
          {
            version: 1,
            experimentId: pin.experimentId,
            authorityPublicKey: pin.authorityPublicKey,
            pinnedAt: new Date().toISOString(),
          },
          store,
        );
      },
    },
  };
}

/**
 * Forgets the identity and authority pin of `barnraise-node-<name>`: the next load creates a new key
 * (a node whose key was revoked or retired on the platform joins again as a new machine).
 */
export async function forgetIndexedDbNode(name: string): Promise<void> {
  await delMany([IDENTITY, PIN], nodeDatabase(name));
}

function nodeDatabase(name: string) {
  return createStore(`barnraise-node-${name}`, "node");
}
