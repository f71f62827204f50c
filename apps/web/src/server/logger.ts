import { pino, type Logger } from "pino";

export type { Logger };

/** The platform's structured logger: JSON lines on stdout. */
export function createLogger(level: string): Logger {
  return pino({ name: "barnraise-web", level });
}
