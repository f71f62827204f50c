import Link from "next/link";
import type { ReactNode } from "react";

/** The page shown instead of one the signed-in user may not see (HTTP-wise a 403, in words). */
export function AccessDenied({
  title,
  children,
  backHref,
  backLabel,
}: {
  readonly title: string;
  readonly children: ReactNode;
  readonly backHref: string;
  readonly backLabel: string;
}) {
  return (
    <main className="page page-narrow">
      <h1>{title}</h1>
      <div className="notice notice-warn">{children}</div>
      <p>
        <Link href={backHref}>{backLabel}</Link>
      </p>
    </main>
  );
}
