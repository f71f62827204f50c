import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { simpleParser } from "mailparser";
import { SMTPServer } from "smtp-server";
import { e2eRun } from "./run-env.ts";

/**
 * The SMTP server of an end-to-end run, on 127.0.0.1 at the run's SMTP port: the platform's
 * BARNRAISE_SMTP_URL points here. Global setup runs it; each message it accepts is parsed and written
 * as JSON into a directory, where the tests (in other processes) read it with `receivedMails`.
 */

export interface ReceivedMail {
  readonly from: string;
  readonly to: string[];
  readonly subject: string;
  readonly text: string;
}

export interface RunningMailServer {
  readonly dir: string;
  close(): Promise<void>;
}

export async function startMailServer(dir: string): Promise<RunningMailServer> {
  await mkdir(dir, { recursive: true });
  let count = 0;
  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, session, callback) {
      simpleParser(stream)
        .then(async (parsed) => {
          count += 1;
          const mail: ReceivedMail = {
            from: session.envelope.mailFrom === false ? "" : session.envelope.mailFrom.address,
            to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
            subject: parsed.subject ?? "",
            text: parsed.text ?? "",
          };
          await writeFile(join(dir, `${String(count).padStart(5, "0")}.json`), JSON.stringify(mail));
          callback();
        })
        .catch((error: unknown) => {
          callback(error instanceof Error ? error : new Error(String(error)));
        });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: Error) => {
      reject(
        new Error(
          `port ${e2eRun.smtp.port} for the SMTP server is in use (set E2E_SMTP_PORT to another port)`,
          {
            cause: error,
          },
        ),
      );
    });
    server.listen(e2eRun.smtp.port, "127.0.0.1", () => {
      resolve();
    });
  });
  return {
    dir,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      }),
  };
}

/** Every message the run's SMTP server has accepted so far, oldest first (E2E_MAIL_DIR, set by global setup). */
export async function receivedMails(): Promise<ReceivedMail[]> {
  const dir = process.env.E2E_MAIL_DIR;
  if (dir === undefined) throw new Error("E2E_MAIL_DIR is not set: global setup starts the SMTP server");
  const files = (await readdir(dir)).filter((file) => file.endsWith(".json")).sort();
  return Promise.all(
    files.map(async (file) => JSON.parse(await readFile(join(dir, file), "utf8")) as ReceivedMail),
  );
}
