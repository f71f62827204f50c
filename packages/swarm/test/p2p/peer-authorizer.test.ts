import { describe, expect, it } from "vitest";
import { PeerAuthorizer } from "../../src/p2p/peer-authorizer.ts";

function clock(start = 1_000_000) {
  const time = { now: start };
  return { time, now: () => time.now };
}

describe("PeerAuthorizer denials for a pass of an untrusted key", () => {
  it("are lifted by a rotation, and remembered as a pass shown, not as silence", () => {
    const { time, now } = clock();
    const authorizer = new PeerAuthorizer({ now });
    const connectedAt = time.now;
    authorizer.denyForKey("dave", "pass of an unknown key", 60_000);
    authorizer.deny("mallory", "another's pass");
    expect(authorizer.isDenied("dave")).toBe(true);

    time.now += 500;
    expect(authorizer.forgiveKeyDenials()).toEqual(["dave"]);
    expect(authorizer.isDenied("dave")).toBe(false);
    // Only the key denial is lifted.
    expect(authorizer.isDenied("mallory")).toBe(true);
    expect(authorizer.forgivenSince("dave", connectedAt)).toBe(true);
    expect(authorizer.forgivenSince("mallory", connectedAt)).toBe(false);
    // A connection made after the rotation has shown nothing yet.
    expect(authorizer.forgivenSince("dave", time.now + 1)).toBe(false);
  });

  it("forget a lifted denial after a couple of minutes", () => {
    const { time, now } = clock();
    const authorizer = new PeerAuthorizer({ now });
    authorizer.denyForKey("dave", "pass of an unknown key", 60_000);
    authorizer.forgiveKeyDenials();
    time.now += 3 * 60_000;
    authorizer.forgiveKeyDenials();
    expect(authorizer.forgivenSince("dave", 0)).toBe(false);
  });

  it("that already ran out are not lifted again", () => {
    const { time, now } = clock();
    const authorizer = new PeerAuthorizer({ now });
    authorizer.denyForKey("dave", "pass of an unknown key", 5_000);
    time.now += 6_000;
    expect(authorizer.forgiveKeyDenials()).toEqual([]);
    expect(authorizer.forgivenSince("dave", 0)).toBe(false);
  });
});
