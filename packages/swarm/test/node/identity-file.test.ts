import { chmod, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ed25519PublicKeyFromPeerId, generateKeyPair, toBase64Url } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { IdentityFileError, loadIdentity, loadOrCreateIdentity } from "../../src/node.ts";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-identity-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("identity file", () => {
  it("creates an identity once, private to the user, and loads the same one after", async () => {
    const path = join(dir, "nested", "identity.json");
    const first = await loadOrCreateIdentity(path);
    expect(first.created).toBe(true);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    const second = await loadOrCreateIdentity(path);
    expect(second.created).toBe(false);
    expect(second.peerId).toBe(first.peerId);
    expect(second.keyPair.secretKey).toEqual(first.keyPair.secretKey);
    expect(ed25519PublicKeyFromPeerId(second.peerId)).toEqual(first.keyPair.publicKey);
  });

  it("returns nothing for a missing file", async () => {
    await expect(loadIdentity(join(dir, "none.json"))).resolves.toBeUndefined();
  });

  it("refuses a file that other users can read", async () => {
    const path = join(dir, "identity.json");
    await loadOrCreateIdentity(path);
    await chmod(path, 0o644);
    await expect(loadIdentity(path)).rejects.toThrow(/chmod 600/);
  });

  it.each([
    ["not JSON", "{"],
    ["the wrong shape", JSON.stringify({ version: 1, type: "RSA", peerId: "x", secretKey: "y" })],
    ["a truncated key", JSON.stringify({ version: 1, type: "Ed25519", peerId: "x", secretKey: "AAAA" })],
  ])("refuses %s with a clear error", async (_, content) => {
    const path = join(dir, "identity.json");
    await writeFile(path, content, { mode: 0o600 });
    await expect(loadIdentity(path)).rejects.toBeInstanceOf(IdentityFileError);
  });

  it("refuses a file whose PeerId does not match its key", async () => {
    const path = join(dir, "identity.json");
    const created = await loadOrCreateIdentity(path);
    const other = generateKeyPair();
    const content = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    content["secretKey"] = toBase64Url(other.secretKey);
    await writeFile(path, JSON.stringify(content), { mode: 0o600 });
    await expect(loadIdentity(path)).rejects.toThrow(`says PeerId ${created.peerId}`);
  });
});
