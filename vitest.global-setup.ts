import { createTestDatabaseTemplates } from "@barnraise/prisma/testing";
import type { TestProject } from "vitest/node";

/** Migrates one template database per provider for the whole run; test databases are cloned from it. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const created = await createTestDatabaseTemplates();
  project.provide("testDatabaseTemplates", created.templates);
  return () => created.dispose();
}
