"use client";

import { useEffect } from "react";

/** Shown when a page fails to render; the server has logged the cause under the digest shown. */
export default function ErrorPage({
  error,
  reset,
}: {
  readonly error: Error & { digest?: string };
  readonly reset: () => void;
}) {
  useEffect(() => {
    document.title = "Something went wrong · Barnraise";
  }, []);
  return (
    <main className="page page-narrow">
      <h1>Something went wrong</h1>
      <p className="notice notice-error">
        This page could not be shown. Try again; if it keeps failing, tell the platform’s administrator
        {error.digest ? (
          <>
            {" "}
            and quote the reference <code>{error.digest}</code>
          </>
        ) : null}
        .
      </p>
      <div className="actions">
        <button type="button" className="button" onClick={reset}>
          Try again
        </button>
      </div>
    </main>
  );
}
