import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { main } from "../src/cli.ts";

const run = promisify(execFile);

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (line: string) => out.push(line), err: (line: string) => err.push(line) }, out, err };
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "barnraise-peer-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("barnraise-peer", () => {
  it("creates an identity, then loads the same PeerId", async () => {
    const file = join(dir, "identity.json");
    const first = capture();
    expect(await main(["identity", "--identity", file], first.io)).toBe(0);
    expect(first.out[0]).toBe(`created identity ${file}`);
    const second = capture();
    expect(await main(["identity", "--identity", file], second.io)).toBe(0);
    expect(second.out[0]).toBe(`loaded identity ${file}`);
    expect(second.out[1]).toBe(first.out[1]);
    expect(first.out[1]).toMatch(/^PeerId: 12D3KooW\w+$/);
  });

  it("answers bad usage with exit code 64 and the usage text", async () => {
    for (const argv of [[], ["train"], ["identity", "--bogus"], ["identity", "extra"]]) {
      const result = capture();
      expect(await main(argv, result.io)).toBe(64);
      expect(result.err.join("\n") + result.out.join("\n")).toContain("Usage: barnraise-peer");
    }
  });

  it("runs as a program under Node", async () => {
    const file = join(dir, "identity.json");
    const { stdout } = await run(process.execPath, [
      join(import.meta.dirname, "../src/cli.ts"),
      "identity",
      "--identity",
      file,
    ]);
    expect(stdout).toMatch(/PeerId: 12D3KooW/);
  });
});
