import type { z } from "zod";
import type { InputIssue } from "../app-error.ts";

/** Zod issues as `{ path: "a.b.0", message }`, the shape every INVALID_INPUT response carries. */
export function issuesOf(error: z.ZodError): InputIssue[] {
  return error.issues.map((issue) => ({ path: issue.path.map(String).join("."), message: issue.message }));
}
