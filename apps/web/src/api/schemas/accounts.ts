import { z } from "zod";
import { usernameSchema } from "@barnraise/protocol";

/** Accounts: self-service sign-up. */

export const MIN_PASSWORD_LENGTH = 8;
export const MAX_PASSWORD_LENGTH = 256;

export const registerUserInputSchema = z.strictObject({
  username: usernameSchema,
  password: z
    .string()
    .min(MIN_PASSWORD_LENGTH, `must be at least ${MIN_PASSWORD_LENGTH} characters`)
    .max(MAX_PASSWORD_LENGTH, `must be at most ${MAX_PASSWORD_LENGTH} characters`),
});

export type RegisterUserInput = z.infer<typeof registerUserInputSchema>;

export const registerUserRequestSchema = registerUserInputSchema.meta({
  id: "RegisterUserRequest",
  description: "A new account that signs in with this username and password",
});

export const registeredUserSchema = z
  .strictObject({ id: z.string(), username: z.string() })
  .meta({ id: "RegisteredUser" });
