import { testDatabaseProviders } from "@barnraise/prisma/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { AppError } from "../src/server/app-error.ts";
import { createAppContext, type AppContext } from "../src/server/context.ts";
import { rateLimits } from "../src/server/http/rate-limit.ts";
import { createTestApp, type TestApp } from "./support/test-app.ts";

async function outcome(consume: Promise<void>): Promise<"allowed" | "limited"> {
  try {
    await consume;
    return "allowed";
  } catch (error) {
    if (error instanceof AppError && error.code === "RATE_LIMITED") return "limited";
    throw error;
  }
}

describe.each(testDatabaseProviders())("rate limits shared through the database (%s)", (provider) => {
  let app: TestApp;
  // A second web instance: its own context (own connection pool) on the same database.
  let other: AppContext;

  beforeEach(async () => {
    app = await createTestApp(provider);
    other = createAppContext(app.ctx.env);
  });
  afterEach(async () => {
    await other.db.$disconnect();
    await app.dispose();
  });

  it("counts a client that alternates instances once", async () => {
    const { points } = rateLimits.join;
    for (let i = 0; i < points; i++) {
      const instance = i % 2 === 0 ? app.ctx : other;
      expect(await outcome(instance.rateLimits.consume("join", "203.0.113.5"))).toBe("allowed");
    }
    expect(await outcome(other.rateLimits.consume("join", "203.0.113.5"))).toBe("limited");
    expect(await outcome(app.ctx.rateLimits.consume("join", "203.0.113.5"))).toBe("limited");
    // Another client and another limit have their own counters.
    expect(await outcome(app.ctx.rateLimits.consume("join", "203.0.113.6"))).toBe("allowed");
    expect(await outcome(other.rateLimits.consume("publicRead", "203.0.113.5"))).toBe("allowed");
    const stored = await app.db.rateLimitCounter.findUnique({ where: { key: "join:203.0.113.5" } });
    expect(stored?.points).toBe(points + 2);
  });

  it("counts concurrent requests on both instances exactly", async () => {
    const points = 10;
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        outcome((i % 2 === 0 ? app.ctx : other).rateLimits.consume("register", "198.51.100.7", points)),
      ),
    );
    expect(results.filter((result) => result === "allowed")).toHaveLength(points);
  });

  it("starts a new window once the last one has expired", async () => {
    await app.db.rateLimitCounter.create({
      data: { key: "modelUpload:user-1", points: 1000, expire: new Date(Date.now() - 1000) },
    });
    expect(await outcome(other.rateLimits.consume("modelUpload", "user-1"))).toBe("allowed");
    const stored = await app.db.rateLimitCounter.findUnique({ where: { key: "modelUpload:user-1" } });
    expect(stored?.points).toBe(1);
    expect(stored?.expire?.getTime()).toBeGreaterThan(Date.now());
  });
});
