import { z } from "zod";
import { registerUserInputSchema } from "../../server/services/register-user.ts";

/** Accounts: self-service sign-up. */

export const registerUserRequestSchema = registerUserInputSchema.meta({
  id: "RegisterUserRequest",
  description: "A new account that signs in with this username and password",
});

export const registeredUserSchema = z
  .strictObject({ id: z.string(), username: z.string() })
  .meta({ id: "RegisteredUser" });
