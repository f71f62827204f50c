import { generateKeyPair } from "@barnraise/protocol";
import { describe, expect, it } from "vitest";
import { hashPassword, verifyPassword } from "../src/server/auth/passwords.ts";
import {
  newAuthorityKey,
  openAuthorityKeyPair,
  openSecretKey,
  SealedKeyError,
  sealSecretKey,
} from "../src/server/authority-keys.ts";
import { EnvError, loadServerEnv } from "../src/server/env.ts";

const secrets = {
  AUTH_SECRET: "a".repeat(32),
  BARNRAISE_SECRET: "b".repeat(32),
};

describe("environment", () => {
  it("refuses to start without the secrets, naming each one", () => {
    expect(() => loadServerEnv({})).toThrow(EnvError);
    expect(() => loadServerEnv({})).toThrow(/AUTH_SECRET is required[\s\S]*BARNRAISE_SECRET is required/);
  });

  it("refuses short secrets and bad URLs", () => {
    expect(() => loadServerEnv({ ...secrets, AUTH_SECRET: "short" })).toThrow(
      /AUTH_SECRET must be at least 32/,
    );
    expect(() => loadServerEnv({ ...secrets, DATABASE_URL: "mysql://x" })).toThrow(/DATABASE_URL/);
    expect(() => loadServerEnv({ ...secrets, BARNRAISE_OIDC_PROVIDERS: "{not json" })).toThrow(
      /BARNRAISE_OIDC_PROVIDERS: must be a JSON array/,
    );
    expect(() => loadServerEnv({ ...secrets, AUTH_GITHUB_ID: "id" })).toThrow(/set both or neither/);
  });

  it("applies defaults: SQLite in the data dir, open sign-up, 4-hour passes", () => {
    const env = loadServerEnv({ ...secrets, BARNRAISE_DATA_DIR: "/srv/barnraise" });
    expect(env.databaseUrl).toBe("file:/srv/barnraise/barnraise.db");
    expect(env.signup).toBe("open");
    expect(env.passTtlMs).toBe(4 * 3600 * 1000);
    expect(env.sealingSecrets).toEqual([secrets.BARNRAISE_SECRET]);
  });

  it("reads OIDC issuers from JSON", () => {
    const env = loadServerEnv({
      ...secrets,
      BARNRAISE_OIDC_PROVIDERS: JSON.stringify([
        { id: "corp", name: "Corp SSO", issuer: "http://localhost:9000", clientId: "c", clientSecret: "s" },
      ]),
    });
    expect(env.oidcProviders.map((p) => p.id)).toEqual(["corp"]);
  });

  it("sends alert e-mail only with both an smtp(s):// URL and a sender", () => {
    expect(loadServerEnv(secrets).smtp).toBeUndefined();
    const from = "Barnraise <alerts@example.org>";
    expect(
      loadServerEnv({
        ...secrets,
        BARNRAISE_SMTP_URL: "smtps://u:p@mail.example.org:465",
        BARNRAISE_MAIL_FROM: from,
      }).smtp,
    ).toEqual({
      url: "smtps://u:p@mail.example.org:465",
      from,
    });
    expect(() => loadServerEnv({ ...secrets, BARNRAISE_SMTP_URL: "smtp://mail.example.org" })).toThrow(
      /BARNRAISE_SMTP_URL and BARNRAISE_MAIL_FROM: set both/,
    );
    expect(() => loadServerEnv({ ...secrets, BARNRAISE_MAIL_FROM: from })).toThrow(/set both/);
    expect(() =>
      loadServerEnv({ ...secrets, BARNRAISE_SMTP_URL: "http://mail.example.org", BARNRAISE_MAIL_FROM: from }),
    ).toThrow(/BARNRAISE_SMTP_URL: must be an smtp:\/\/ or smtps:\/\/ URL/);
  });
});

describe("authority key sealing", () => {
  const binding = { experimentId: "demo", keyVersion: 1 };

  it("round-trips with the current secret and with a previous one", () => {
    const pair = generateKeyPair();
    const sealed = sealSecretKey(pair.secretKey, "old-secret-".padEnd(40, "x"), binding);
    expect(
      openSecretKey(sealed, ["new-secret-".padEnd(40, "y"), "old-secret-".padEnd(40, "x")], binding),
    ).toEqual(pair.secretKey);
  });

  it("does not open with a wrong secret, another experiment, another key version, or a flipped bit", () => {
    const created = newAuthorityKey([secrets.BARNRAISE_SECRET], binding);
    const row = { id: "demo", authorityKeyVersion: 1, authoritySecretKey: created.sealedSecretKey };
    expect(openAuthorityKeyPair(row, [secrets.BARNRAISE_SECRET]).publicKey).toBeInstanceOf(Uint8Array);
    expect(() => openAuthorityKeyPair(row, ["c".repeat(32)])).toThrow(SealedKeyError);
    expect(() => openAuthorityKeyPair({ ...row, id: "other" }, [secrets.BARNRAISE_SECRET])).toThrow(
      SealedKeyError,
    );
    expect(() =>
      openAuthorityKeyPair({ ...row, authorityKeyVersion: 2 }, [secrets.BARNRAISE_SECRET]),
    ).toThrow(SealedKeyError);
    const last = created.sealedSecretKey.at(-2) === "A" ? "B" : "A";
    const tampered = created.sealedSecretKey.slice(0, -2) + last + created.sealedSecretKey.slice(-1);
    expect(() => openSecretKey(tampered, [secrets.BARNRAISE_SECRET], binding)).toThrow(SealedKeyError);
    expect(() => openSecretKey("v2.x.y", [secrets.BARNRAISE_SECRET], binding)).toThrow(/unknown format/);
  });

  it("never stores the secret key in the clear", () => {
    const pair = generateKeyPair();
    const sealed = sealSecretKey(pair.secretKey, secrets.BARNRAISE_SECRET, binding);
    expect(sealed).not.toContain(Buffer.from(pair.secretKey).toString("base64url").slice(0, 16));
  });
});

describe("passwords", () => {
  it("verifies the right password only", async () => {
    const hash = await hashPassword("correct horse battery");
    expect(hash).toMatch(/^scrypt\$32768\$8\$1\$/);
    expect(await verifyPassword("correct horse battery", hash)).toBe(true);
    expect(await verifyPassword("correct horse batterY", hash)).toBe(false);
    expect(await verifyPassword("anything", "garbage")).toBe(false);
  });
});
