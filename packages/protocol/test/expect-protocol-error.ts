/**
 * Assertions that an entry point refused input the way the protocol promises: with a
 * ProtocolError carrying a known code, and never with any other exception.
 */
import fc from "fast-check";
import { ProtocolError, ProtocolErrorCode } from "../src/index.ts";

export const C = ProtocolErrorCode;
const KNOWN_CODES: ReadonlySet<string> = new Set(Object.values(ProtocolErrorCode));

function show(value: unknown): string {
  if (value instanceof Error) return `${value.constructor.name}: ${value.message}`;
  try {
    return fc.stringify(value).slice(0, 200);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

function checkProtocolError(error: unknown, codes: readonly ProtocolErrorCode[] | undefined): ProtocolError {
  if (!(error instanceof ProtocolError)) {
    throw new Error(`expected a ProtocolError, got ${show(error)}`, { cause: error });
  }
  if (!KNOWN_CODES.has(error.code)) {
    throw new Error(`ProtocolError carries unknown code ${show(error.code)}`, { cause: error });
  }
  if (codes !== undefined && !codes.includes(error.code)) {
    throw new Error(`expected ${codes.join(" or ")}, got ${error.code} (${error.message})`, { cause: error });
  }
  return error;
}

/** `fn` must throw, synchronously, a ProtocolError (with one of `codes`, when given). */
export function expectProtocolError(fn: () => unknown, codes?: readonly ProtocolErrorCode[]): ProtocolError {
  let result: unknown;
  try {
    result = fn();
  } catch (error) {
    return checkProtocolError(error, codes);
  }
  if (isThenable(result)) {
    Promise.resolve(result).catch(() => undefined); // reported below, not as an unhandled rejection
    throw new Error("expected a synchronous throw, got a promise");
  }
  throw new Error(`expected a ProtocolError, but it returned ${show(result)}`);
}

/** `fn` must reject with a ProtocolError (with one of `codes`, when given). */
export async function expectProtocolErrorAsync(
  fn: () => Promise<unknown>,
  codes?: readonly ProtocolErrorCode[],
): Promise<ProtocolError> {
  let result: unknown;
  try {
    result = await fn();
  } catch (error) {
    return checkProtocolError(error, codes);
  }
  throw new Error(`expected a ProtocolError, but it resolved to ${show(result)}`);
}

/** Like `expectProtocolError`, but success is allowed too. Returns the value, or undefined. */
export function expectNothingButProtocolError(
  fn: () => unknown,
  codes?: readonly ProtocolErrorCode[],
): unknown {
  try {
    return fn();
  } catch (error) {
    checkProtocolError(error, codes);
    return undefined;
  }
}
