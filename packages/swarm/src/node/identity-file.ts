import {
  fromBase64Url,
  generateKeyPair,
  keyPairFromSecretKey,
  peerIdFromEd25519PublicKey,
  toBase64Url,
  type KeyPair,
} from "@barnraise/protocol";
import { z } from "zod";
import type { Identity, NodeStore } from "../identity.ts";
import { authorityPinFile, authorityPinPath } from "./authority-pin-file.ts";
import { PrivateFileError, readPrivateFile, writePrivateFileAtomic } from "./private-file.ts";

/**
 * A node's identity (see `Identity`) on disk, and the authority pin beside it.
 *
 * File format (JSON, mode 0600): { "version": 1, "type": "Ed25519", "peerId": "12D3…",
 * "secretKey": base64url(seed ‖ public key) }. The PeerId is stored for people to read and is
 * checked against the key on load.
 */

const identityFileSchema = z.strictObject({
  version: z.literal(1),
  type: z.literal("Ed25519"),
  peerId: z.string(),
  secretKey: z.string(),
});

export class IdentityFileError extends Error {
  override readonly name = "IdentityFileError";
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(`identity file ${path}: ${message}`, options);
    this.path = path;
  }
}

/** The node's identity in the file at `identityPath`, its authority pin beside it. */
export function fileNodeStore(identityPath: string): NodeStore {
  return {
    location: identityPath,
    loadOrCreateIdentity: () => loadOrCreateIdentity(identityPath),
    pins: authorityPinFile(authorityPinPath(identityPath)),
  };
}

/** Loads the identity at `path`, or creates one there (atomically, mode 0600) if there is none. */
export async function loadOrCreateIdentity(path: string): Promise<Identity> {
  const existing = await loadIdentity(path);
  if (existing !== undefined) return existing;
  const keyPair = generateKeyPair();
  const peerId = peerIdFromEd25519PublicKey(keyPair.publicKey).toString();
  const body = JSON.stringify(
    { version: 1, type: "Ed25519", peerId, secretKey: toBase64Url(keyPair.secretKey) },
    null,
    2,
  );
  await writePrivateFileAtomic(path, `${body}\n`);
  return { keyPair, peerId, created: true };
}

/** Loads the identity at `path`; undefined when there is no file. Refuses a file others can read. */
export async function loadIdentity(path: string): Promise<Identity | undefined> {
  let text: string | undefined;
  try {
    text = await readPrivateFile(path);
  } catch (error) {
    if (!(error instanceof PrivateFileError)) throw error;
    throw new IdentityFileError(path, error.reason, { cause: error.cause });
  }
  if (text === undefined) return undefined;
  let parsed: z.output<typeof identityFileSchema>;
  try {
    parsed = identityFileSchema.parse(JSON.parse(text));
  } catch (error) {
    throw new IdentityFileError(path, "is not a Barnraise identity file", { cause: error });
  }
  let keyPair: KeyPair;
  try {
    keyPair = keyPairFromSecretKey(fromBase64Url(parsed.secretKey, "secretKey"));
  } catch (error) {
    throw new IdentityFileError(path, "holds an invalid key", { cause: error });
  }
  const peerId = peerIdFromEd25519PublicKey(keyPair.publicKey).toString();
  if (peerId !== parsed.peerId) {
    throw new IdentityFileError(path, `says PeerId ${parsed.peerId} but its key is ${peerId}`);
  }
  return { keyPair, peerId, created: false };
}
