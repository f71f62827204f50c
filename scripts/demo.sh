#!/usr/bin/env bash
# The demo on embedded defaults: a SQLite database and data directory in .data/ (secrets generated
# there on first run), the dataset shards, a seeded demo organizer, volunteer and `mnist-mlp`
# experiment, the platform on http://localhost:$PORT (default 3000), and a local swarm: one aux peer
# and two volunteer peers training together (DEMO_PEERS=0 for the platform alone). Their logs go to
# .data/logs/. Ctrl-C stops everything.
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
peers="${DEMO_PEERS:-2}"
if ! [[ "$peers" =~ ^[0-9]+$ ]] || ((peers > 8)); then
  log "DEMO_PEERS must be a number from 0 to 8, got '$peers'"
  exit 1
fi
tokens="$data_dir/demo-tokens.env"
log "seeding the demo organizer, volunteer and experiment"
if ((peers > 0)); then
  node scripts/seed-demo.ts --tokens-file "$tokens"
else
  node scripts/seed-demo.ts
fi
log "building the web app (skipped while its sources are unchanged)"
node scripts/build-web.ts

log "starting Barnraise at http://localhost:$port  (press Ctrl-C to stop)"
# Every process runs in its own process group (job control on), so that Ctrl-C or a `kill` of this
# script stops npm, its shell and `next start` together, and nothing is left holding the port.
set -m
PORT="$port" npm run start --silent -w @barnraise/web &
server=$!
swarm=()
set +m # no job-status notices
stopping=0
stop() {
  stopping=1
  # The peers and the aux first: they leave the swarm cleanly on SIGTERM.
  for pid in "${swarm[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${swarm[@]}"; do wait "$pid" 2>/dev/null || true; done
  kill -TERM -- "-$server" 2>/dev/null || true
}
trap stop INT TERM HUP

if ((peers > 0)); then
  url="http://localhost:$port"
  # Wait for the platform to answer before the swarm joins it.
  if ! node -e '
    const url = process.argv[1] + "/api/v1/health";
    const deadline = Date.now() + 120_000;
    const poll = async () => {
      try { if ((await fetch(url)).ok) process.exit(0); } catch {}
      if (Date.now() > deadline) process.exit(1);
      setTimeout(poll, 500);
    };
    poll();' "$url"; then
    log "the platform did not answer at $url within 2 minutes"
    stop
    exit 1
  fi
  set -a
  . "$tokens"
  set +a
  logs="$data_dir/logs"
  mkdir -p "$logs"
  set -m
  BARNRAISE_TOKEN="$DEMO_AUX_TOKEN" node apps/aux/src/cli.ts --server "$url" \
    --listen /ip4/127.0.0.1/tcp/0 --identity "$data_dir/demo-swarm/aux/identity.json" \
    >"$logs/aux.log" 2>&1 &
  swarm+=($!)
  # The peers find the swarm through the address the aux registers: let it do that first.
  for ((wait_s = 0; wait_s < 60; wait_s++)); do
    grep -q '"registered address"' "$logs/aux.log" 2>/dev/null && break
    kill -0 "${swarm[0]}" 2>/dev/null || break
    sleep 1
  done
  if ! grep -q '"registered address"' "$logs/aux.log" 2>/dev/null; then
    log "the aux peer has not registered its address (see $logs/aux.log); starting the peers anyway"
  fi
  for ((i = 1; i <= peers; i++)); do
    BARNRAISE_TOKEN="$DEMO_PEER_TOKEN" node apps/peer/src/cli.ts --server "$url" --json \
      --listen /ip4/127.0.0.1/tcp/0 --identity "$data_dir/demo-swarm/peer-$i/identity.json" \
      --data-dir "$data_dir/demo-swarm/peer-$i/data" >"$logs/peer-$i.log" 2>&1 &
    swarm+=($!)
  done
  set +m
  log "started an aux peer and $peers volunteer peers; their logs are in $logs"
fi

log "dashboard: http://localhost:$port/experiments/demo"
log "sign in as demo-organizer (or demo-volunteer) with password $DEMO_ORGANIZER_PASSWORD (kept in $secrets)"

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
# The platform ended on its own: take the swarm down with it.
for pid in "${swarm[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
exit "$status"
