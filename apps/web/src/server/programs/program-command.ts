/**
 * The commands the volunteer and manage pages show: run the program the platform serves with `npx`
 * (a machine with Node.js ≥ 22 needs nothing else), or through the platform's install script on a
 * machine that may lack Node.js. Without built programs (a developer's platform), the bare program
 * name, as `npm run peer` / `npm run aux` run it from a clone.
 */

export type ProgramName = "barnraise-peer" | "barnraise-aux";

/** Where the platform serves a program: its tarball and the install script. */
export interface ProgramLink {
  readonly url: string;
  readonly installScript: string;
}

export function runCommand(
  program: ProgramName,
  origin: string,
  token: string,
  link: ProgramLink | undefined,
  subcommand?: "doctor",
): string {
  const head = link === undefined ? program : `npx -y ${link.url}`;
  return [head, subcommand, "--server", origin, "--token", token].filter(Boolean).join(" ");
}

export function installCommand(
  program: ProgramName,
  origin: string,
  token: string,
  link: ProgramLink,
): string {
  return `curl -fsSL ${link.installScript} | sh -s -- ${program} --server ${origin} --token ${token}`;
}
