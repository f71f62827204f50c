import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestApp, type TestApp } from "./support/test-app.ts";

describe.each(testDatabaseProviders())("test platform on %s", (provider) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp(provider);
  });
  afterAll(() => app.dispose());

  it("starts on an empty, migrated database of its own", async () => {
    expect(app.ctx.env.databaseUrl.startsWith(provider === "sqlite" ? "file:" : "postgresql:")).toBe(true);
    expect(await app.db.user.count()).toBe(0);
    await app.db.user.create({ data: { username: "someone" } });
    expect(await app.db.user.count()).toBe(1);
  });
});
