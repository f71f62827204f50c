import type { AppContext } from "../context.ts";
import { parseInput } from "../http/json-body.ts";
import { createPasswordUser, type RegisteredUser } from "../services/register-user.ts";
import { registerUserInputSchema } from "../../api/schemas/accounts.ts";

/**
 * A user who signs in with a username and password, whatever BARNRAISE_SIGNUP says: for seeding
 * the demo and for tests. The username and password rules are the sign-up form's.
 */
export async function createUserWithPassword(
  ctx: AppContext,
  input: { username: string; password: string },
): Promise<RegisteredUser> {
  return createPasswordUser(ctx, parseInput(registerUserInputSchema, input));
}
