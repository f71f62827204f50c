#!/usr/bin/env bash
# The demo on embedded defaults: a SQLite database and data directory in .data/ (secrets generated
# there on first run), the dataset shards, a seeded demo organizer and `mnist-mlp` experiment, and the
# platform on http://localhost:$PORT (default 3000). Ctrl-C stops it.
#
#   npm run demo              (or: PORT=8080 npm run demo; BARNRAISE_DATA_DIR=/srv/x npm run demo)
#
# Run it through scripts/with-node.sh (as `npm run demo` does): that provides a suitable Node.js
# and the installed dependencies.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port="${PORT:-3000}"
export NEXT_TELEMETRY_DISABLED=1

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
  log "PORT must be a TCP port number, got '$port'"
  exit 1
fi

cd "$root"
data_dir="${BARNRAISE_DATA_DIR:-$root/.data}"
mkdir -p "$data_dir"
export BARNRAISE_DATA_DIR="$data_dir"
export DATABASE_URL="${DATABASE_URL:-file:$data_dir/barnraise.db}"

# Secrets are made once and kept (mode 600), so sign-ins and sealed keys survive a restart.
secrets="$data_dir/secrets.env"
if [[ ! -f "$secrets" ]]; then
  log "generating secrets in $secrets"
  (
    umask 077
    node -e 'const r = () => require("node:crypto").randomBytes(32).toString("base64url");
      console.log(`AUTH_SECRET=${r()}\nBARNRAISE_SECRET=${r()}\nDEMO_ORGANIZER_PASSWORD=${r().slice(0, 16)}`)' >"$secrets"
  )
fi
set -a
. "$secrets"
set +a

log "migrating the database"
prisma migrate deploy >/dev/null
log "preparing the dataset shards"
node apps/web/src/server/datasets/prepare-datasets-command.ts --data-dir "$data_dir"
log "seeding the demo organizer and experiment"
node scripts/seed-demo.ts
log "building the web app"
npm run build --silent -w @barnraise/web

log "starting Barnraise at http://localhost:$port  (press Ctrl-C to stop)"
log "dashboard: http://localhost:$port/experiments/demo"
log "sign in as demo-organizer with password $DEMO_ORGANIZER_PASSWORD (kept in $secrets)"
# The server runs in its own process group (job control on), so that Ctrl-C or a `kill` of this
# script stops npm, its shell and `next start` together, and nothing is left holding the port.
set -m
PORT="$port" npm run start --silent -w @barnraise/web &
server=$!
set +m # no job-status notices
stopping=0
stop() {
  stopping=1
  kill -TERM -- "-$server" 2>/dev/null || true
}
trap stop INT TERM HUP

status=0
wait "$server" || status=$?
# A trapped signal interrupts `wait`; wait again until the server has shut down.
while kill -0 "$server" 2>/dev/null; do
  wait "$server" || status=$?
done
if ((stopping)); then
  log "stopped"
  exit 0
fi
exit "$status"
