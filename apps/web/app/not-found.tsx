import Link from "next/link";

export default function NotFound() {
  return (
    <main className="page page-narrow">
      <h1>Page not found</h1>
      <p className="muted">
        There is nothing here. The experiment may have another id, or the link is mistyped.
      </p>
      <p>
        <Link href="/#experiments">See all experiments</Link>
      </p>
    </main>
  );
}
