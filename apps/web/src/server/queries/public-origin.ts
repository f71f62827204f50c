import { headers } from "next/headers";
import type { AppContext } from "../context.ts";

/**
 * The URL volunteers use to reach the platform, as shown in join commands: BARNRAISE_PUBLIC_URL, or
 * the origin of the request the page answers (behind a proxy, its X-Forwarded-* headers).
 */
export async function publicOrigin(ctx: AppContext): Promise<string> {
  return requestOrigin(ctx, await headers());
}

/** {@link publicOrigin} for a route handler's request headers. */
export function requestOrigin(ctx: AppContext, list: Headers): string {
  if (ctx.env.publicUrl !== undefined) return ctx.env.publicUrl;
  const host = list.get("x-forwarded-host")?.split(",")[0]?.trim() ?? list.get("host") ?? "localhost:3000";
  const proto = list.get("x-forwarded-proto")?.split(",")[0]?.trim() ?? "http";
  return `${proto}://${host}`;
}
