import { AppError, AppErrorCode } from "../app-error.ts";
import { hashPassword } from "../auth/passwords.ts";
import { isUniqueViolation } from "@barnraise/prisma";
import type { AppContext } from "../context.ts";
import type { RegisterUserInput } from "../../api/schemas/accounts.ts";

/** Self-service sign-up with a username and password (when BARNRAISE_SIGNUP is "open"). */

export interface RegisteredUser {
  readonly id: string;
  readonly username: string;
}

export function assertSignupOpen(ctx: AppContext): void {
  if (ctx.env.signup === "closed") {
    throw new AppError(AppErrorCode.SIGNUP_CLOSED, "this platform does not accept new accounts");
  }
}

export async function registerUser(ctx: AppContext, input: RegisterUserInput): Promise<RegisteredUser> {
  assertSignupOpen(ctx);
  const user = await createPasswordUser(ctx, input);
  ctx.logger.info({ username: user.username }, "user registered");
  return user;
}

/** Creates a user who signs in with a password; CONFLICT when the username is taken. */
export async function createPasswordUser(ctx: AppContext, input: RegisterUserInput): Promise<RegisteredUser> {
  const passwordHash = await hashPassword(input.password);
  try {
    return await ctx.db.user.create({
      data: { username: input.username, passwordHash },
      select: { id: true, username: true },
    });
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    throw new AppError(AppErrorCode.CONFLICT, `the username ${input.username} is taken`, {
      issues: [{ path: "username", message: "is taken" }],
    });
  }
}
