import { BrandedError } from "@barnraise/protocol";
import { AppErrorCode } from "../api/error-codes.ts";
export { AppErrorCode, appErrorStatus } from "../api/error-codes.ts";

export interface InputIssue {
  /** Dotted path of the offending field, "" for the whole input. */
  readonly path: string;
  readonly message: string;
}

/** One error type for the platform's use cases, with a code of `AppErrorCode`. */
export class AppError extends BrandedError {
  static override readonly brand = Symbol.for("barnraise.AppError");
  override readonly name = "AppError";
  readonly code: AppErrorCode;
  readonly issues: readonly InputIssue[] | undefined;
  /** Extra response headers, e.g. Retry-After. */
  readonly headers: Readonly<Record<string, string>> | undefined;

  constructor(
    code: AppErrorCode,
    message: string,
    options: { issues?: readonly InputIssue[]; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.code = code;
    this.issues = options.issues;
    this.headers = options.headers;
  }
}

export function isAppError(error: unknown): error is AppError {
  return error instanceof AppError;
}
