#!/usr/bin/env bash
# Runs a command with a suitable Node.js and installed workspace dependencies.
#
#   scripts/with-node.sh <command> [args...]
#
# 1. If the `node` on PATH is older than the minimum (see `engines` in package.json),
#    Node.js $BARNRAISE_NODE_VERSION (default 24.21.0) is installed from the npm registry into .tools/
#    and put first on PATH. Native addons are then built against that Node's headers
#    (npm_config_nodedir), so they load under the Node that runs them.
# 2. If package-lock.json or the Node.js version changed since the last install, `npm ci` runs;
#    if prisma/schema.prisma changed, the database clients are generated again.
# 3. The command runs with that environment.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_version="${BARNRAISE_NODE_VERSION:-24.21.0}"
min_major=22
min_minor=18
tools="$root/.tools/node-$node_version"

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  local v major minor
  v="$(node -p 'process.versions.node' 2>/dev/null)" || return 1
  major="${v%%.*}"
  minor="${v#*.}"
  minor="${minor%%.*}"
  ((major > min_major || (major == min_major && minor >= min_minor)))
}

if ! node_ok; then
  if [[ ! -x "$tools/node_modules/.bin/node" ]]; then
    found="$(command -v node >/dev/null 2>&1 && node --version || echo none)"
    log "Node.js $found is older than $min_major.$min_minor; installing Node.js $node_version from the npm registry into .tools/"
    rm -rf "$tools" && mkdir -p "$tools"
    # A package.json of its own keeps npm from walking up into the workspace and installing there.
    printf '{ "private": true }\n' >"$tools/package.json"
    npm install --prefix "$tools" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
      "node@$node_version" >&2
    [[ -x "$tools/node_modules/.bin/node" ]] || { log "Node.js $node_version did not install into .tools/"; exit 1; }
  fi
  export PATH="$tools/node_modules/.bin:$PATH"
  headers="$(ls -d "$tools"/node_modules/node/node_modules/node-*/include 2>/dev/null | head -n 1 || true)"
  if [[ -n "$headers" ]]; then
    export npm_config_nodedir="${headers%/include}"
  fi
  node_ok || { log "could not provision Node.js $node_version"; exit 1; }
fi

# Reinstall when the lockfile or the Node.js version changes (native addons are built per version),
# and regenerate the database clients when the schema changes.
stamp="$root/node_modules/.barnraise-installed"
installed() { sha256sum <"$root/package-lock.json"; node --version; }
if [[ ! -f "$stamp" ]] || ! cmp -s <(installed) "$stamp"; then
  log "installing dependencies with Node.js $(node --version)"
  (cd "$root" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 NEXT_TELEMETRY_DISABLED=1 npm ci --no-audit --no-fund --loglevel=error >&2)
  installed >"$stamp"
fi
generated="$root/prisma/generated/.schema-sha256"
if [[ ! -f "$generated" ]] || ! cmp -s <(sha256sum <"$root/prisma/schema.prisma") "$generated"; then
  log "generating the database clients"
  (cd "$root" && npm run --silent db:generate >/dev/null)
  sha256sum <"$root/prisma/schema.prisma" >"$generated"
fi
node_ok || { log "Node.js $(node --version) is on PATH after setup; expected $min_major.$min_minor or newer"; exit 1; }

export NEXT_TELEMETRY_DISABLED=1
export PATH="$root/node_modules/.bin:$PATH"
cd "$root"
exec "$@"
