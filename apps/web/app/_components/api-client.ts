/**
 * The pages' way to call the platform's REST API from the browser: same-origin JSON requests, and
 * every failure as `{ ok: false, code, message, issues }` read from the API's error body, so a form
 * can show each problem next to its field.
 */

export interface ApiIssue {
  /** Dotted field path, e.g. "config.training.targetBatchSize"; "" for the whole input. */
  readonly path: string;
  readonly message: string;
}

export type ApiResult<T> =
  | { readonly ok: true; readonly status: number; readonly data: T }
  | {
      readonly ok: false;
      readonly status: number;
      readonly code: string;
      readonly message: string;
      readonly issues: readonly ApiIssue[];
    };

interface ErrorBody {
  error?: { code?: unknown; message?: unknown; issues?: unknown };
}

export async function callApi<T>(
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
  path: string,
  body?: unknown,
): Promise<ApiResult<T>> {
  let response: Response;
  try {
    // A FormData body goes as multipart/form-data (the browser sets the boundary); anything else as JSON.
    const form = body instanceof FormData;
    response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: body === undefined || form ? {} : { "content-type": "application/json" },
      ...(body === undefined ? {} : { body: form ? body : JSON.stringify(body) }),
    });
  } catch {
    return {
      ok: false,
      status: 0,
      code: "NETWORK",
      message: "The server could not be reached. Check your connection and try again.",
      issues: [],
    };
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text === "" ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (response.ok) return { ok: true, status: response.status, data: parsed as T };

  const error = (parsed as ErrorBody | undefined)?.error;
  const issues = Array.isArray(error?.issues)
    ? (error.issues as unknown[]).filter(isIssue)
    : ([] as ApiIssue[]);
  return {
    ok: false,
    status: response.status,
    code: typeof error?.code === "string" ? error.code : `HTTP_${response.status}`,
    message:
      typeof error?.message === "string"
        ? error.message
        : `The server answered ${response.status} ${response.statusText}.`,
    issues,
  };
}

function isIssue(value: unknown): value is ApiIssue {
  const issue = value as { path?: unknown; message?: unknown } | null;
  return typeof issue?.path === "string" && typeof issue.message === "string";
}

/** A failure as one sentence for a form's status line. */
export function describeFailure(result: { code: string; message: string }): string {
  switch (result.code) {
    case "UNAUTHENTICATED":
      return "Your session has ended. Sign in again.";
    case "FORBIDDEN":
      return `You are not allowed to do this: ${result.message}.`;
    case "RATE_LIMITED":
      return "Too many requests. Wait a moment and try again.";
    default:
      return capitalize(result.message);
  }
}

function capitalize(text: string): string {
  const sentence = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(sentence) ? sentence : `${sentence}.`;
}
