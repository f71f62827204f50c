/**
 * Next.js calls `register` once when a server process starts: it starts the alert loop (webhooks and
 * e-mail, src/server/alerts/) in the Node.js runtime, on the process's app context.
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== "nodejs") return;
  const [{ getAppContext }, { startAlertWorker }] = await Promise.all([
    import("./src/server/context.ts"),
    import("./src/server/alerts/alert-worker.ts"),
  ]);
  startAlertWorker(getAppContext());
}
