"use client";

import { useState } from "react";

/** Text to copy (a command or a secret) with a Copy button. */
export function CopyBox({ text, label }: { readonly text: string; readonly label: string }) {
  const [copied, setCopied] = useState<"yes" | "failed" | null>(null);

  async function copy() {
    try {
      await navigator.clipboard.writeText(text);
      setCopied("yes");
    } catch {
      setCopied("failed");
    }
  }

  return (
    <div className="code-box">
      <pre aria-label={label} tabIndex={0}>
        <code>{text}</code>
      </pre>
      <button type="button" className="button button-quiet button-small" onClick={() => void copy()}>
        {copied === "yes" ? "Copied" : "Copy"}
        <span className="visually-hidden"> {label}</span>
      </button>
      <span role="status" className="visually-hidden">
        {copied === "yes"
          ? `${label} copied`
          : copied === "failed"
            ? "Copying failed; select the text and copy it"
            : ""}
      </span>
    </div>
  );
}
