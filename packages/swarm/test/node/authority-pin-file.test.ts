import { chmod, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keyPairFromSeed } from "@barnraise/protocol";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  AUTHORITY_PIN_FILE,
  authorityPinPath,
  loadAuthorityPin,
  saveAuthorityPin,
} from "../../src/node/authority-pin-file.ts";
import { PrivateFileError } from "../../src/node/private-file.ts";

const authority = keyPairFromSeed(new Uint8Array(32).fill(1)).publicKey;
const rotated = keyPairFromSeed(new Uint8Array(32).fill(2)).publicKey;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-pin-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("authority pin file", () => {
  it("lives next to the identity", () => {
    expect(authorityPinPath("/home/v/.barnraise/identity.json")).toBe(
      `/home/v/.barnraise/${AUTHORITY_PIN_FILE}`,
    );
  });

  it("is absent before the first join, then round-trips, private to the user", async () => {
    const path = join(dir, "nested", AUTHORITY_PIN_FILE);
    await expect(loadAuthorityPin(path)).resolves.toBeUndefined();
    await saveAuthorityPin(
      path,
      { experimentId: "exp-1", authorityPublicKey: authority },
      Date.UTC(2026, 0, 1),
    );
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect((await stat(join(dir, "nested"))).mode & 0o777).toBe(0o700);
    await expect(loadAuthorityPin(path)).resolves.toEqual({
      experimentId: "exp-1",
      authorityPublicKey: authority,
    });
    expect(JSON.parse(await readFile(path, "utf8"))).toMatchObject({
      version: 1,
      pinnedAt: "2026-01-01T00:00:00.000Z",
    });
  });

  it("replaces an earlier pin atomically, leaving no temporary file", async () => {
    const path = join(dir, AUTHORITY_PIN_FILE);
    await saveAuthorityPin(path, { experimentId: "exp-1", authorityPublicKey: authority });
    await saveAuthorityPin(path, { experimentId: "exp-1", authorityPublicKey: rotated });
    expect((await loadAuthorityPin(path))?.authorityPublicKey).toEqual(rotated);
    expect(await readdir(dir)).toEqual([AUTHORITY_PIN_FILE]);
  });

  it("refuses a file others can read", async () => {
    const path = join(dir, AUTHORITY_PIN_FILE);
    await saveAuthorityPin(path, { experimentId: "exp-1", authorityPublicKey: authority });
    await chmod(path, 0o644);
    await expect(loadAuthorityPin(path)).rejects.toThrow(/chmod 600/);
  });

  it.each([
    ["not JSON", "{"],
    [
      "another format",
      JSON.stringify({ version: 2, experimentId: "e", authorityPublicKey: "x", pinnedAt: "" }),
    ],
    [
      "a bad key",
      JSON.stringify({ version: 1, experimentId: "e", authorityPublicKey: "AAAA", pinnedAt: "" }),
    ],
  ])("refuses %s, saying how to recover", async (_what, text) => {
    const path = join(dir, AUTHORITY_PIN_FILE);
    await writeFile(path, text, { mode: 0o600 });
    const error = await loadAuthorityPin(path).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(PrivateFileError);
    expect((error as Error).message).toMatch(/delete it/);
  });
});
