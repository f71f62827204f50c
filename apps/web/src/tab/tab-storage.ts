/**
 * What "Contribute from this browser" keeps in the browser, by name, for the worker that writes it
 * and the page that clears it: the verified models and shards (`@barnraise/models/browser`'s
 * IndexedDB blob stores, `barnraise-blobs-<cache>-<store>`). The node's key and authority pin are
 * kept apart, per user and experiment, and stay across sign-outs: the same volunteer signing in
 * again contributes as the same node.
 */

/** The worker's blob cache, shared by the browser's identities. */
export const TAB_CACHE = "tab";

const CACHE_DATABASES = `barnraise-blobs-${TAB_CACHE}-`;

/**
 * Deletes the tab's cached models and shards: a private run's data does not stay on a shared
 * computer after its volunteer signs out. Browsers that cannot list their databases keep them.
 * Resolves once each deletion is done or waits for a worker still holding its database open (the
 * browser deletes it when that worker ends, as the sign-out's navigation ends it). Returns the
 * names of the databases it deleted or queued.
 */
export async function clearTabCaches(): Promise<string[]> {
  if (typeof indexedDB === "undefined" || typeof indexedDB.databases !== "function") return [];
  const names = (await indexedDB.databases())
    .map(({ name }) => name)
    .filter((name): name is string => name?.startsWith(CACHE_DATABASES) === true);
  await Promise.all(
    names.map(
      (name) =>
        new Promise<void>((resolve) => {
          const request = indexedDB.deleteDatabase(name);
          const done = () => {
            resolve();
          };
          request.onsuccess = done;
          request.onerror = done;
          request.onblocked = done;
        }),
    ),
  );
  return names;
}
