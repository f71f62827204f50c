#!/usr/bin/env bash
# Builds the web app and serves it on http://localhost:$PORT (default 3000). Ctrl-C stops it.
#
#   npm run demo              (or: PORT=8080 npm run demo)
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
log "building the web app"
npm run build --silent -w @barnraise/web

log "starting Barnraise at http://localhost:$port  (press Ctrl-C to stop)"
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
