"use client";

import { signOut } from "next-auth/react";
import { useState } from "react";
import { clearTabCaches } from "../../src/tab/tab-storage.ts";

/** How long the sign-out waits for the browser to delete the tab's caches. */
const CLEAR_CACHES_MS = 2_000;

export function SignOutButton() {
  const [busy, setBusy] = useState(false);
  return (
    <button
      type="button"
      className="button button-quiet"
      disabled={busy}
      onClick={() => {
        setBusy(true);
        // The models and shards a tab cached for this volunteer go with the session.
        const cleared = clearTabCaches().catch(() => []);
        const timeout = new Promise((resolve) => setTimeout(resolve, CLEAR_CACHES_MS));
        void Promise.race([cleared, timeout]).then(() => signOut({ redirectTo: "/" }));
      }}
    >
      {busy ? "Signing out…" : "Sign out"}
    </button>
  );
}
