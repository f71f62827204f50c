import { generateKeyPair } from "@barnraise/protocol";
import { afterEach, describe, expect, it } from "vitest";
import { PassHolder } from "../../src/p2p/pass-holder.ts";
import { eventually, silentLogger, TestAuthority } from "../support/swarm-fixtures.ts";

const holders: PassHolder[] = [];
afterEach(() => {
  for (const holder of holders.splice(0)) holder.stop();
});

describe("PassHolder after a rotation of the authority key", () => {
  it("fetches a pass of the new key at once, and asks again while a refresh brings one of the old key", async () => {
    const authority = new TestAuthority("exp-holder");
    const keys = authority.keys({ logger: silentLogger });
    const identity = generateKeyPair();
    const { previous } = authority.rotate();
    // The first refresh races the rotation on the platform: still a pass of the old key.
    const answers = [
      authority.pass(identity, { signer: previous, issuedAt: Date.now() - 60_000 }),
      authority.pass(identity),
    ];
    let calls = 0;
    const holder = new PassHolder({
      initial: authority.pass(identity, { signer: previous, issuedAt: Date.now() - 120_000 }),
      passes: keys.passVerifier(),
      refresh: () => Promise.resolve(answers[Math.min(calls++, answers.length - 1)] ?? ""),
      logger: silentLogger,
      retryMs: 50,
    });
    holders.push(holder);
    holder.start();
    // Not followed yet: the pass held is of the current key as far as the node knows.
    holder.renewIfOutdated();
    expect(calls).toBe(0);

    keys.follow(authority.certificates);
    holder.renewIfOutdated();
    await eventually(() => calls === 2, "two refreshes", 5_000);
    expect(keys.passVerifier().signedByCurrentKey(holder.token())).toBe(true);
    // Holding a current pass, it does not ask again before the usual time.
    holder.renewIfOutdated();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(calls).toBe(2);
  });
});
