import { describe, expect, it } from "vitest";
import {
  DEFAULT_ROTATION_GRACE_MS,
  generateKeyPair,
  MemoryNonceStore,
  portableCrypto,
  ProtocolErrorCode,
  ReplayGuard,
  RequestVerifier,
  signRequest,
} from "../src/index.ts";
import { nodeCrypto } from "../src/node.ts";
import { expectProtocolError, expectProtocolErrorAsync } from "./expect-protocol-error.ts";
import { bytes, EXPERIMENT, HOUR, makeWorld, NOW, SCOPE, SKEW_MS } from "./fixtures.ts";

/**
 * An access pass verifier that learned a rotation of the authority key trusts the new key, and the
 * previous key only for passes issued before the rotation and only for the grace period after it;
 * what it remembered of verified passes never outlives that.
 */

const C = ProtocolErrorCode;
const MINUTE = 60_000;
const GRACE = 5 * MINUTE;
/** The rotation happens at NOW; passes of the old key are issued before it. */
const ROTATED_AT = NOW;

describe.each([portableCrypto, nodeCrypto])(
  "access pass verifier across a key rotation ($name)",
  (crypto) => {
    function rotatedWorld() {
      const world = makeWorld(crypto);
      const next = generateKeyPair();
      const oldPass = world.pass(world.alice, {
        issuedAt: ROTATED_AT - MINUTE,
        expiresAt: ROTATED_AT + HOUR,
      });
      const newPass = world.pass(
        world.alice,
        { issuedAt: ROTATED_AT + 1, expiresAt: ROTATED_AT + HOUR },
        next,
      );
      const trust = () => {
        world.passes.trustRotation({
          publicKey: next.publicKey,
          previousPublicKey: world.authority.publicKey,
          rotatedAt: ROTATED_AT,
          graceMs: GRACE,
        });
      };
      return { ...world, next, oldPass, newPass, trust };
    }

    it("refuses passes of a key it has not learned, and accepts them once it trusts the rotation", () => {
      const world = rotatedWorld();
      expectProtocolError(() => world.passes.verify(world.newPass, { now: NOW + 1 }), [C.PASS_BAD_SIGNATURE]);
      world.trust();
      expect(world.passes.verify(world.newPass, { now: NOW + 1 }).username).toBe("alice");
      expect(world.passes.authorityPublicKey).toEqual(world.next.publicKey);
    });

    it("accepts a pass of the previous key issued before the rotation until the grace ends, not a millisecond after", () => {
      const world = rotatedWorld();
      world.trust();
      expect(world.passes.verify(world.oldPass, { now: ROTATED_AT + GRACE - 1 }).username).toBe("alice");
      expectProtocolError(
        () => world.passes.verify(world.oldPass, { now: ROTATED_AT + GRACE }),
        [C.PASS_KEY_ROTATED],
      );
    });

    it("refuses a pass of the previous key issued at or after the rotation, even within the grace", () => {
      const world = rotatedWorld();
      world.trust();
      for (const issuedAt of [ROTATED_AT, ROTATED_AT + 1]) {
        const late = world.pass(world.alice, { issuedAt, expiresAt: ROTATED_AT + HOUR });
        expectProtocolError(
          () => world.passes.verify(late, { now: ROTATED_AT + MINUTE }),
          [C.PASS_KEY_ROTATED],
        );
      }
      // One issued a millisecond before is still good.
      const justBefore = world.pass(world.alice, { issuedAt: ROTATED_AT - 1, expiresAt: ROTATED_AT + HOUR });
      expect(world.passes.verify(justBefore, { now: ROTATED_AT + MINUTE }).issuedAt).toBe(ROTATED_AT - 1);
    });

    it("a pass verified and remembered before the rotation does not outlive the grace", () => {
      const world = rotatedWorld();
      expect(world.passes.verify(world.oldPass, { now: ROTATED_AT - 1 }).username).toBe("alice");
      world.trust();
      expect(world.passes.verify(world.oldPass, { now: ROTATED_AT + GRACE - 1 }).username).toBe("alice");
      expectProtocolError(
        () => world.passes.verify(world.oldPass, { now: ROTATED_AT + GRACE }),
        [C.PASS_KEY_ROTATED],
      );
    });

    it("a pass remembered before the rotation but issued after it is refused once the rotation is known", () => {
      const world = rotatedWorld();
      // Signed by the old key after it was replaced (the platform had not rotated yet, or it leaked).
      const late = world.pass(world.alice, { issuedAt: ROTATED_AT + MINUTE, expiresAt: ROTATED_AT + HOUR });
      expect(world.passes.verify(late, { now: ROTATED_AT + MINUTE }).username).toBe("alice");
      world.trust();
      expectProtocolError(
        () => world.passes.verify(late, { now: ROTATED_AT + MINUTE }),
        [C.PASS_KEY_ROTATED],
      );
    });

    it("after a second rotation, each replaced key keeps its own grace; a key it jumped over is dropped", () => {
      const world = rotatedWorld();
      world.passes.verify(world.oldPass, { now: ROTATED_AT - 1 });
      world.trust();
      const third = generateKeyPair();
      const secondAt = ROTATED_AT + MINUTE;
      world.passes.trustRotation({
        publicKey: third.publicKey,
        previousPublicKey: world.next.publicKey,
        rotatedAt: secondAt,
        graceMs: GRACE,
      });
      // The first key's passes count until its own grace ends, remembered or not.
      const other = world.pass(world.bob, { issuedAt: ROTATED_AT - MINUTE, expiresAt: ROTATED_AT + HOUR });
      for (const token of [world.oldPass, other]) {
        expect(world.passes.verify(token, { now: ROTATED_AT + GRACE - 1 }).experimentId).toBe(EXPERIMENT);
        expectProtocolError(
          () => world.passes.verify(token, { now: ROTATED_AT + GRACE }),
          [C.PASS_KEY_ROTATED],
        );
      }
      // The second key's pass, issued before the second rotation, until the second grace ends.
      expect(world.passes.verify(world.newPass, { now: secondAt + GRACE - 1 }).username).toBe("alice");
      expectProtocolError(
        () => world.passes.verify(world.newPass, { now: secondAt + GRACE }),
        [C.PASS_KEY_ROTATED],
      );

      // A verifier shown only the second certificate jumps from the first key to the third: passes
      // of the first key no longer verify at all.
      const jumped = rotatedWorld();
      jumped.passes.verify(jumped.oldPass, { now: ROTATED_AT - 1 });
      jumped.passes.trustRotation({
        publicKey: third.publicKey,
        previousPublicKey: generateKeyPair().publicKey,
        rotatedAt: secondAt,
        graceMs: GRACE,
      });
      expectProtocolError(
        () => jumped.passes.verify(jumped.oldPass, { now: secondAt }),
        [C.PASS_BAD_SIGNATURE],
      );
    });

    it("uses DEFAULT_ROTATION_GRACE_MS when no grace is given", () => {
      const world = rotatedWorld();
      world.passes.trustRotation({
        publicKey: world.next.publicKey,
        previousPublicKey: world.authority.publicKey,
        rotatedAt: ROTATED_AT,
      });
      expect(
        world.passes.verify(world.oldPass, { now: ROTATED_AT + DEFAULT_ROTATION_GRACE_MS - 1 }).username,
      ).toBe("alice");
      expectProtocolError(
        () => world.passes.verify(world.oldPass, { now: ROTATED_AT + DEFAULT_ROTATION_GRACE_MS }),
        [C.PASS_KEY_ROTATED],
      );
    });

    it("tells passes of the current key from passes of the previous one", () => {
      const world = rotatedWorld();
      expect(world.passes.signedByCurrentKey(world.oldPass)).toBe(true);
      world.passes.verify(world.oldPass, { now: ROTATED_AT - 1 });
      world.trust();
      expect(world.passes.signedByCurrentKey(world.oldPass)).toBe(false);
      expect(world.passes.signedByCurrentKey(world.newPass)).toBe(true);
      world.passes.verify(world.newPass, { now: ROTATED_AT + 1 });
      expect(world.passes.signedByCurrentKey(world.newPass)).toBe(true);
      expect(world.passes.signedByCurrentKey("junk")).toBe(false);
    });

    it("refuses a rotation to the same key, a key of the wrong length, or a negative grace", () => {
      const world = rotatedWorld();
      const key = world.authority.publicKey;
      expect(() => {
        world.passes.trustRotation({ publicKey: key, previousPublicKey: key, rotatedAt: NOW });
      }).toThrow(RangeError);
      expectProtocolError(() => {
        world.passes.trustRotation({ publicKey: key.subarray(1), previousPublicKey: key, rotatedAt: NOW });
      }, [C.INVALID_KEY]);
      expect(() => {
        world.passes.trustRotation({
          publicKey: world.next.publicKey,
          previousPublicKey: key,
          rotatedAt: NOW,
          graceMs: -1,
        });
      }).toThrow(RangeError);
    });
  },
);

describe("request verifier with a former recipient key", () => {
  const world = makeWorld(nodeCrypto);
  const former = generateKeyPair();
  const until = NOW + MINUTE;
  const verifier = new RequestVerifier({
    crypto: nodeCrypto,
    passes: world.passes,
    recipientPublicKey: world.bob.publicKey,
    formerRecipients: [{ publicKey: former.publicKey, until }],
    replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: SKEW_MS }),
  });
  const request = (recipientPublicKey: Uint8Array, time: number) =>
    signRequest(nodeCrypto, world.alice, {
      pass: world.pass(world.alice),
      recipientPublicKey,
      scope: SCOPE,
      body: bytes("x"),
      time,
    });

  it("takes requests addressed to the former key until `until`, and to the current key always", async () => {
    const check = { scope: SCOPE, body: bytes("x") };
    await verifier.verify(request(former.publicKey, until - 1), { ...check, now: until - 1 });
    await verifier.verify(request(world.bob.publicKey, until), { ...check, now: until });
    await expectProtocolErrorAsync(
      () => verifier.verify(request(former.publicKey, until), { ...check, now: until }),
      [C.REQUEST_WRONG_RECIPIENT],
    );
    await expectProtocolErrorAsync(
      () => verifier.verify(request(generateKeyPair().publicKey, until - 1), { ...check, now: until - 1 }),
      [C.REQUEST_WRONG_RECIPIENT],
    );
  });
});
