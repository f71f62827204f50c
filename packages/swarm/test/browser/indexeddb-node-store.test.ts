import { BrowserLab } from "@barnraise/browserlab";
import { fromBase64Url, generateKeyPair, peerIdFromEd25519PublicKey, toBase64Url } from "@barnraise/protocol";
import type { JSHandle } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { BrowserStore } from "../support/browser-store-entry.ts";

/**
 * A browser's node store in a real Chromium: the identity and the authority pin in IndexedDB, kept
 * across page loads, one identity however many callers ask at once (@barnraise/browserlab).
 */

const ENTRY = new URL("../support/browser-store-entry.ts", import.meta.url).pathname;

let lab: BrowserLab;
let databases = 0;

beforeAll(async () => {
  lab = await BrowserLab.start();
}, 60_000);
afterEach(async () => {
  await lab.closePages();
});
afterAll(async () => {
  await lab.stop();
});

/** The store's handle in a newly loaded page (of the lab's one browser profile). */
async function loadPage(): Promise<JSHandle<BrowserStore>> {
  return (await lab.open<BrowserStore>(ENTRY, "browserStore")).handle;
}

/** A database name no other test uses. */
function database(prefix: string): string {
  databases += 1;
  return `${prefix}-${databases}`;
}

describe("the browser's node store", () => {
  it("creates the identity once and finds it again on the next page load", async () => {
    const db = database("identity");
    const made = await (await loadPage()).evaluate((store, name) => store.identity(name), db);
    expect(made.created).toBe(true);
    expect(made.peerId).toBe(peerIdFromEd25519PublicKey(fromBase64Url(made.publicKey, "key")).toString());
    await lab.closePages();

    const reloaded = await loadPage();
    expect(await reloaded.evaluate((store, name) => store.identity(name), db)).toEqual({
      ...made,
      created: false,
    });
    // Another database is another identity.
    const other = await reloaded.evaluate((store, name) => store.identity(name), `${db}-other`);
    expect(other.peerId).not.toBe(made.peerId);
  }, 60_000);

  it("gives every caller the same identity when many ask at once", async () => {
    const all = await (
      await loadPage()
    ).evaluate((store, name) => store.identities(name, 8), database("race"));
    expect(new Set(all.map((identity) => identity.peerId)).size).toBe(1);
    expect(all.filter((identity) => identity.created)).toHaveLength(1);
  }, 60_000);

  it("keeps the authority pin, and refuses a damaged identity with what to do", async () => {
    const db = database("pin");
    const authorityPublicKey = toBase64Url(generateKeyPair().publicKey);
    const first = await loadPage();
    expect(await first.evaluate((store, name) => store.loadPin(name), db)).toBeUndefined();
    await first.evaluate((store, [name, key]) => store.savePin(name, "exp-1", key), [
      db,
      authorityPublicKey,
    ] as const);
    await lab.closePages();

    const reloaded = await loadPage();
    expect(await reloaded.evaluate((store, name) => store.loadPin(name), db)).toEqual({
      experimentId: "exp-1",
      authorityPublicKey,
    });
    await reloaded.evaluate((store, name) => store.corrupt(name, { version: 1, secretKey: "oops" }), db);
    await expect(reloaded.evaluate((store, name) => store.identity(name), db)).rejects.toThrow(
      /holds no valid identity; clear this site's data/,
    );
  }, 60_000);

  it("forgets the identity and pin when told: the next load makes a new key", async () => {
    const db = database("forget");
    const page = await loadPage();
    const first = await page.evaluate((store, name) => store.identity(name), db);
    await page.evaluate((store, [name, key]) => store.savePin(name, "exp-1", key), [
      db,
      toBase64Url(generateKeyPair().publicKey),
    ] as const);
    await page.evaluate((store, name) => store.forget(name), db);
    expect(await page.evaluate((store, name) => store.loadPin(name), db)).toBeUndefined();
    const second = await page.evaluate((store, name) => store.identity(name), db);
    expect(second.created).toBe(true);
    expect(second.peerId).not.toBe(first.peerId);
  }, 60_000);
});
