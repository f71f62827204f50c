import { ProtocolError, ProtocolErrorCode } from "@barnraise/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError, AppErrorCode } from "../src/server/app-error.ts";
import { route } from "../src/server/http/route.ts";
import { ObjectNotFoundError } from "../src/server/storage/object-store.ts";
import { callRoute, createTestApp, type TestApp } from "./support/test-app.ts";

/**
 * The Next server bundles the platform's modules once for its routes and once more for its
 * instrumentation hook, which builds the shared app context: the rate limiter, the request verifier
 * and the storage it holds throw errors made by the other copy of their modules. Here a second copy
 * of each module (imported under another URL) makes them, and the route layer still answers with the
 * error's status, not 500.
 */

async function secondCopy<T>(path: string): Promise<T> {
  return (await import(/* @vite-ignore */ `${path}?second-copy`)) as T;
}

describe("errors made by another copy of their module", () => {
  let platform: TestApp;
  beforeAll(async () => {
    platform = await createTestApp("sqlite");
  });
  afterAll(async () => {
    await platform.dispose();
  });

  it("are still recognized by instanceof", async () => {
    const app = await secondCopy<typeof import("../src/server/app-error.ts")>("../src/server/app-error.ts");
    const storage = await secondCopy<typeof import("../src/server/storage/object-store.ts")>(
      "../src/server/storage/object-store.ts",
    );
    expect(app.AppError).not.toBe(AppError);
    expect(new app.AppError(AppErrorCode.RATE_LIMITED, "slow down")).toBeInstanceOf(AppError);
    expect(new storage.ObjectNotFoundError("a/b")).toBeInstanceOf(ObjectNotFoundError);
    expect(new AppError(AppErrorCode.NOT_FOUND, "x")).not.toBeInstanceOf(ObjectNotFoundError);
    expect(new Error("plain")).not.toBeInstanceOf(AppError);
  });

  it("are answered with their status by route()", async () => {
    const app = await secondCopy<typeof import("../src/server/app-error.ts")>("../src/server/app-error.ts");
    const protocol = await secondCopy<typeof import("../../../packages/protocol/src/errors.ts")>(
      "../../../packages/protocol/src/errors.ts",
    );
    expect(protocol.ProtocolError).not.toBe(ProtocolError);
    const limited = route(() => {
      throw new app.AppError(AppErrorCode.RATE_LIMITED, "too many", { headers: { "retry-after": "7" } });
    });
    const replayed = route(() => {
      throw new protocol.ProtocolError(ProtocolErrorCode.REQUEST_REPLAYED, "request nonce was already used");
    });
    const first = await callRoute(limited, "/x");
    expect(first.status).toBe(429);
    expect(first.headers.get("retry-after")).toBe("7");
    const second = await callRoute(replayed, "/x");
    expect(second.status).toBe(409);
    expect(await second.json()).toMatchObject({ error: { code: "REQUEST_REPLAYED" } });
  });
});
