/** "running" or "paused", as a badge. */
export function ExperimentStatusBadge({ status }: { readonly status: "running" | "paused" }) {
  return (
    <span className={status === "running" ? "badge badge-ok" : "badge badge-warn"}>
      {status === "running" ? "Running" : "Paused"}
    </span>
  );
}
