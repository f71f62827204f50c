/** A same-site path to go to after signing in, or "/" when `value` is missing or points elsewhere. */
export function safeRedirectPath(value: unknown): string {
  if (typeof value !== "string") return "/";
  // Only paths on this site: "/x", not "//evil.example" or "/\evil.example" (browsers read both as hosts).
  if (!value.startsWith("/") || value.startsWith("//") || value.startsWith("/\\")) return "/";
  return value;
}
