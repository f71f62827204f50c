import { dirname, join } from "node:path";
import { decodePublicKey, encodePublicKey } from "@barnraise/protocol";
import { z } from "zod";
import type { AuthorityPin, AuthorityPinStore } from "../platform/authority-pin.ts";
import { PrivateFileError, readPrivateFile, writePrivateFileAtomic } from "./private-file.ts";

/**
 * The authority pin (see `AuthorityPin`) in a file beside the node's identity file.
 *
 * File format (JSON, mode 0600): { "version": 1, "experimentId": "…", "authorityPublicKey":
 * base64url(32 bytes), "pinnedAt": ISO time }.
 */

export const AUTHORITY_PIN_FILE = "authority-pin.json";

const pinFileSchema = z.strictObject({
  version: z.literal(1),
  experimentId: z.string().min(1).max(256),
  authorityPublicKey: z.string(),
  pinnedAt: z.string(),
});

/** The pin store at `path` (a file, mode 0600). */
export function authorityPinFile(path: string): AuthorityPinStore {
  return {
    location: path,
    load: () => loadAuthorityPin(path),
    save: (pin) => saveAuthorityPin(path, pin),
  };
}

/** Where the pin of the identity at `identityPath` lives: `authority-pin.json` in the same directory. */
export function authorityPinPath(identityPath: string): string {
  return join(dirname(identityPath), AUTHORITY_PIN_FILE);
}

/** The pin at `path`; undefined when there is none (first join). Throws PrivateFileError on a bad file. */
export async function loadAuthorityPin(path: string): Promise<AuthorityPin | undefined> {
  const text = await readPrivateFile(path);
  if (text === undefined) return undefined;
  try {
    const parsed = pinFileSchema.parse(JSON.parse(text));
    return {
      experimentId: parsed.experimentId,
      authorityPublicKey: decodePublicKey(parsed.authorityPublicKey),
    };
  } catch (cause) {
    throw new PrivateFileError(
      path,
      "is not a Barnraise authority pin; delete it to pin the key of the next join",
      { cause },
    );
  }
}

/** Records `pin` at `path` (atomically, mode 0600), replacing any earlier pin. */
export async function saveAuthorityPin(
  path: string,
  pin: AuthorityPin,
  now: number = Date.now(),
): Promise<void> {
  const body = {
    version: 1,
    experimentId: pin.experimentId,
    authorityPublicKey: encodePublicKey(pin.authorityPublicKey),
    pinnedAt: new Date(now).toISOString(),
  };
  await writePrivateFileAtomic(path, `${JSON.stringify(body, null, 2)}\n`);
}
