import { readJson } from "../../../../src/server/http/json-body.ts";
import { clientIp } from "../../../../src/server/http/rate-limit.ts";
import { json, route } from "../../../../src/server/http/route.ts";
import { assertSameOrigin } from "../../../../src/server/http/session.ts";
import { assertSignupOpen, registerUser } from "../../../../src/server/services/register-user.ts";
import { registerUserInputSchema } from "../../../../src/api/schemas/accounts.ts";

/** POST /api/v1/users: sign up with a username and password. */
export const POST = route(async ({ req, ctx }) => {
  assertSameOrigin(req, ctx);
  assertSignupOpen(ctx);
  await ctx.rateLimits.consume("register", clientIp(req), ctx.env.signupLimitPerHour);
  const input = await readJson(req, registerUserInputSchema);
  return json(await registerUser(ctx, input), { status: 201 });
});
