import { readdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { openApiDocument } from "../src/api/openapi.ts";
import { accountPaths } from "../src/api/paths/accounts.ts";
import { alertPaths } from "../src/api/paths/alerts.ts";
import { experimentPaths } from "../src/api/paths/experiments.ts";

/**
 * The OpenAPI document describes the routes that exist: every route file of the session API
 * appears with each HTTP method it exports, and nothing is documented that no route serves.
 */

const API_DIR = resolve(import.meta.dirname, "../app/api/v1");
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;

/** The session routes (accounts, experiments, allowlists, tokens, nodes, alerts), relative to app/api/v1. */
const SESSION_ROUTE_FILES = [
  "users/route.ts",
  "me/nodes/route.ts",
  "me/nodes/[nodeId]/retire/route.ts",
  "experiments/route.ts",
  "experiments/[id]/route.ts",
  "experiments/[id]/status/route.ts",
  "experiments/[id]/rollback/route.ts",
  "experiments/[id]/metrics/discard/route.ts",
  "experiments/[id]/authority-key/route.ts",
  "experiments/[id]/allowlist/route.ts",
  "experiments/[id]/allowlist/[username]/route.ts",
  "experiments/[id]/join-requests/route.ts",
  "experiments/[id]/membership/route.ts",
  "experiments/[id]/tokens/route.ts",
  "experiments/[id]/tokens/[tokenId]/route.ts",
  "experiments/[id]/alerts/route.ts",
  "experiments/[id]/alerts/webhooks/route.ts",
  "experiments/[id]/alerts/webhooks/[webhookId]/route.ts",
  "experiments/[id]/alerts/test/route.ts",
  // The organizer's GET; the aux's signed POST is documented on the same path.
  "experiments/[id]/validator-flags/route.ts",
  "me/alerts/route.ts",
];

/** `experiments/[id]/route.ts` → `/api/v1/experiments/{id}`. */
function apiPath(file: string): string {
  const dir = file.replace(/\/?route\.ts$/, "");
  return `/api/v1${dir === "" ? "" : `/${dir}`}`.replace(/\[([^\]]+)\]/g, "{$1}");
}

async function exportedMethods(file: string): Promise<string[]> {
  const module = (await import(join(API_DIR, file))) as Record<string, unknown>;
  return METHODS.filter((method) => typeof module[method] === "function");
}

describe("OpenAPI document", () => {
  const document = openApiDocument();

  it("builds as OpenAPI 3.1 with the shared error body", () => {
    expect(document.openapi).toBe("3.1.0");
    expect(document.components?.schemas).toHaveProperty("ErrorResponse");
    expect(document.components?.schemas).toHaveProperty("Experiment");
    expect(JSON.parse(JSON.stringify(document))).toEqual(document);
  });

  it("lists every session route file that exists", async () => {
    const all = (await readdir(API_DIR, { recursive: true })).filter((file) => file.endsWith("route.ts"));
    for (const file of SESSION_ROUTE_FILES) expect(all).toContain(file);
  });

  it.each(SESSION_ROUTE_FILES)("documents %s with each method it exports", async (file) => {
    const methods = await exportedMethods(file);
    expect(methods.length).toBeGreaterThan(0);
    const item = document.paths?.[apiPath(file)] as Record<string, unknown> | undefined;
    expect(item, apiPath(file)).toBeDefined();
    for (const method of methods) {
      const operation = item?.[method.toLowerCase()] as { responses?: Record<string, unknown> } | undefined;
      expect(operation, `${method} ${apiPath(file)}`).toBeDefined();
      expect(Object.keys(operation?.responses ?? {}).some((status) => status.startsWith("2"))).toBe(true);
    }
    const documented = Object.keys(item ?? {}).filter((key) => METHODS.some((m) => m.toLowerCase() === key));
    expect(documented.sort()).toEqual(methods.map((m) => m.toLowerCase()).sort());
  });

  it("documents no session path without a route file", () => {
    const served = new Set(SESSION_ROUTE_FILES.map(apiPath));
    for (const path of Object.keys({ ...accountPaths, ...experimentPaths, ...alertPaths }))
      expect(served).toContain(path);
  });

  it("describes request bodies, path parameters and error responses of mutations", () => {
    const patch = document.paths?.["/api/v1/experiments/{id}"]?.patch;
    expect(patch?.requestBody).toBeDefined();
    expect(patch?.parameters).toEqual([expect.objectContaining({ in: "path", name: "id", required: true })]);
    expect(Object.keys(patch?.responses ?? {})).toEqual(
      expect.arrayContaining(["200", "400", "401", "403", "404"]),
    );
    const create = document.paths?.["/api/v1/experiments/{id}/tokens"]?.post;
    expect(JSON.stringify(create?.responses?.["403"])).toMatch(/NOT_ALLOWLISTED/);
  });
});
