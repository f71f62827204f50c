import { PROGRAMS_PATH, type ProgramCatalog } from "./programs.ts";

/**
 * The install script the platform serves for machines without Node.js ≥ 22:
 *
 *   curl -fsSL <platform>/api/v1/programs/install.sh | sh -s -- barnraise-peer --server … --token …
 *
 * It uses the `node` on PATH when it is new enough; otherwise it downloads the Node.js release the
 * platform itself runs from nodejs.org into ~/.barnraise/node, checked against nodejs.org's SHA-256
 * list, and when it cannot, it says exactly what to install. The program's tarball comes from this
 * platform and must match the SHA-256 the platform published before it runs.
 */

/** A POSIX shell word that stands for exactly `text`. */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export interface InstallScriptOptions {
  readonly origin: string;
  readonly catalog: ProgramCatalog;
  /** The Node.js release to download when the machine has none, e.g. "24.21.0". */
  readonly nodeVersion: string;
}

export function installScript({ origin, catalog, nodeVersion }: InstallScriptOptions): string {
  const cases = catalog.programs
    .map((p) => `  ${p.name}) file=${shellQuote(p.file)}; sha256=${shellQuote(p.sha256)} ;;`)
    .join("\n");
  const names = catalog.programs.map((p) => p.name).join("|");
  return `#!/bin/sh
# Runs a Barnraise program from ${origin} on this machine.
#
#   curl -fsSL ${origin}${PROGRAMS_PATH}/install.sh | sh -s -- ${names} --server URL --token TOKEN
#
# It uses the node on PATH when it is Node.js 22 or newer; otherwise it downloads Node.js
# ${nodeVersion} from nodejs.org into ~/.barnraise/node (checked against nodejs.org's SHA-256 list).
# The program comes from the platform and runs only if it matches the SHA-256 the platform published.
set -eu
platform=${shellQuote(origin)}
node_version=${shellQuote(nodeVersion)}
home_dir="\${BARNRAISE_HOME:-$HOME/.barnraise}"
manual="Install Node.js 22 or newer (https://nodejs.org/en/download, or your system's package manager), then run this command again."

say() { printf 'barnraise: %s\\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

program="\${1:-}"
case "$program" in
${cases}
  *) say "usage: sh install.sh ${names} --server URL --token TOKEN"; exit 64 ;;
esac
shift

fetch() {
  if command -v curl >/dev/null 2>&1; then curl -fsSL -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then wget -q -O "$2" "$1"
  else fail "neither curl nor wget is installed; install one of them and run this again"; fi
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  else fail "neither sha256sum nor shasum is installed to check downloads; install coreutils and run this again"; fi
}

node_ok() {
  "$1" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' >/dev/null 2>&1
}

if command -v node >/dev/null 2>&1 && node_ok node && command -v npx >/dev/null 2>&1; then
  node_bin="$(dirname "$(command -v node)")"
else
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    *) fail "there is no Node.js download for $(uname -s) here. $manual" ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "there is no Node.js download for $(uname -m) here. $manual" ;;
  esac
  name="node-v$node_version-$os-$arch"
  node_bin="$home_dir/node/$name/bin"
  if ! [ -x "$node_bin/node" ]; then
    say "Node.js 22 or newer is not installed; downloading Node.js $node_version from nodejs.org"
    mkdir -p "$home_dir/node"
    tmp="$(mktemp -d)"
    base="https://nodejs.org/dist/v$node_version"
    if ! fetch "$base/$name.tar.gz" "$tmp/$name.tar.gz" || ! fetch "$base/SHASUMS256.txt" "$tmp/SHASUMS256.txt"; then
      rm -rf "$tmp"
      fail "could not download Node.js from nodejs.org. $manual"
    fi
    expected="$(grep " $name.tar.gz\\$" "$tmp/SHASUMS256.txt" | cut -d' ' -f1)"
    if [ -z "$expected" ] || [ "$(sha256_of "$tmp/$name.tar.gz")" != "$expected" ]; then
      rm -rf "$tmp"
      fail "the Node.js download does not match nodejs.org's checksum. $manual"
    fi
    tar -xzf "$tmp/$name.tar.gz" -C "$home_dir/node"
    rm -rf "$tmp"
  fi
fi
PATH="$node_bin:$PATH"
export PATH

mkdir -p "$home_dir/programs"
tarball="$home_dir/programs/$file"
if ! [ -f "$tarball" ] || [ "$(sha256_of "$tarball")" != "$sha256" ]; then
  say "downloading $file from $platform"
  fetch "$platform${PROGRAMS_PATH}/$file" "$tarball.part" || fail "could not download $file from $platform; check the address and your network"
  if [ "$(sha256_of "$tarball.part")" != "$sha256" ]; then
    rm -f "$tarball.part"
    fail "$file does not match the SHA-256 the platform published; run this again"
  fi
  mv "$tarball.part" "$tarball"
fi
exec npx --yes --package "$tarball" -- "$program" "$@"
`;
}
