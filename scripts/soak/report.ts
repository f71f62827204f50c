import type { RestartFigure } from "./restart-figures.ts";
import type { ChaosKind, CheckResult } from "./types.ts";

/**
 * The soak's printed result: the checks as a table (PASS/FAIL and their numbers), each check's
 * details, and the restart figures — one row per restart, then survivals by kind.
 */

const MAX_DETAILS = 40;

export function formatChecks(results: readonly CheckResult[]): string[] {
  const width = Math.max(...results.map((result) => result.name.length), "check".length);
  const lines = [`${"check".padEnd(width)}  result  numbers`];
  for (const result of results) {
    lines.push(`${result.name.padEnd(width)}  ${result.pass ? "PASS" : "FAIL"}    ${result.summary}`);
  }
  for (const result of results) {
    if (result.details.length === 0) continue;
    lines.push("", `${result.name}:`);
    for (const detail of result.details.slice(0, MAX_DETAILS)) lines.push(`  ${detail}`);
    if (result.details.length > MAX_DETAILS) {
      lines.push(`  … and ${result.details.length - MAX_DETAILS} more (report.json)`);
    }
  }
  return lines;
}

const KINDS: readonly ChaosKind[] = [
  "peer-kill",
  "peer-interrupt",
  "retoken",
  "aux-restart",
  "platform-restart",
];

/** One row per restart (time since the soak began), then survivals by kind and steps lost. */
export function formatFigures(figures: readonly RestartFigure[], soakStart: number): string[] {
  const header = [
    "#",
    "at",
    "kind",
    "target",
    "highest",
    "resumed",
    "lost",
    "to shared step",
    "aux back",
    "outcome",
  ];
  const rows = figures.map((figure, i) => [
    String(i + 1),
    clock(figure.at - soakStart),
    figure.kind,
    figure.target ?? "",
    text(figure.highestBefore),
    text(figure.resumedFrom),
    text(figure.stepsLost),
    seconds(figure.secondsToSharedStep),
    figure.kind === "aux-restart" ? seconds(figure.auxBackSeconds) : "",
    figure.outcome,
  ]);
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => row[column]?.length ?? 0)),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column] ?? 0))
      .join("  ")
      .trimEnd();
  const survived = KINDS.flatMap((kind) => {
    const ofKind = figures.filter((figure) => figure.kind === kind);
    if (ofKind.length === 0) return [];
    const resumed = ofKind.filter((figure) => figure.outcome === "resumed").length;
    return [`${kind} ${resumed}/${ofKind.length}`];
  });
  const lost = figures.flatMap((figure) => (figure.stepsLost === null ? [] : [figure.stepsLost]));
  return [
    "restarts (highest: the swarm's step before; resumed: the step it went on from; aux back: to the new aux's first step posted):",
    `  ${line(header)}`,
    ...rows.map((row) => `  ${line(row)}`),
    `restarts survived by kind: ${survived.length === 0 ? "none" : survived.join(", ")}`,
    `steps lost: ${lost.reduce((sum, value) => sum + value, 0)} in all, at most ${Math.max(0, ...lost)} in one restart`,
  ];
}

function seconds(value: number | null): string {
  return value === null ? "—" : `${value.toFixed(1)} s`;
}

function text(value: number | null): string {
  return value === null ? "—" : String(value);
}

/** "+m:ss" since the soak began. */
export function clock(ms: number): string {
  const total = Math.max(0, Math.round(ms / 1000));
  return `+${Math.floor(total / 60)}:${String(total % 60).padStart(2, "0")}`;
}
