import { z } from "zod";

/**
 * Where a webhook may point: an absolute http:// or https:// URL of at most 2,000 characters, with no
 * user name or password in it (the signature authenticates the platform; a receiver's credentials
 * would be shown on the manage page and kept in every delivery's log). Loopback and private addresses
 * are allowed: a self-hosted platform often alerts a service on its own network.
 */
export const webhookUrlSchema = z
  .string()
  .trim()
  .max(2000, "must be at most 2000 characters")
  .pipe(z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }))
  .refine((text) => {
    const url = URL.parse(text);
    return url === null || (url.username === "" && url.password === "");
  }, "must not contain a user name or password");
