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
#
# Starting again on the same data works after Ctrl-C and after a crash alike: what an earlier start
# left running is stopped first (scripts/demo-preflight.ts). Every wait has a deadline and says every
# 10 s what it is waiting for; when one passes, the script says what did not happen and where its log
# is, stops what it started, and exits 1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port="${PORT:-3000}"
export NEXT_TELEMETRY_DISABLED=1

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
  log "PORT must be a TCP port number, got '$port'"
  exit 1
fi
peers="${DEMO_PEERS:-2}"
if ! [[ "$peers" =~ ^[0-9]+$ ]] || ((peers > 8)); then
  log "DEMO_PEERS must be a number from 0 to 8, got '$peers'"
  exit 1
fi

cd "$root"
data_dir="${BARNRAISE_DATA_DIR:-$root/.data}"
mkdir -p "$data_dir"
export BARNRAISE_DATA_DIR="$data_dir"
export DATABASE_URL="${DATABASE_URL:-file:$data_dir/barnraise.db}"

# A demo already running on this data directory stops this one; what a killed one left running is
# stopped; a port in use is named, before anything starts.
preflight=(--data-dir "$data_dir" --port "$port")
if [[ "$DATABASE_URL" == file:* ]]; then
  database="${DATABASE_URL#file:}"
  preflight+=(--database "${database%%\?*}")
fi
node scripts/demo-preflight.ts "${preflight[@]}"
# Every process this start runs carries this mark, by which the next start finds its leftovers.
export BARNRAISE_DEMO_DATA_DIR="$data_dir"

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
with_deadline 120 "migrating the database" prisma migrate deploy >/dev/null
log "preparing the dataset shards"
with_deadline 900 "preparing the dataset shards" \
  node apps/web/src/server/datasets/prepare-datasets-command.ts --data-dir "$data_dir"
tokens="$data_dir/demo-tokens.env"
log "seeding the demo organizer, volunteer and experiment"
if ((peers > 0)); then
  with_deadline 120 "seeding the demo" node scripts/seed-demo.ts --tokens-file "$tokens"
else
  with_deadline 120 "seeding the demo" node scripts/seed-demo.ts
fi
log "building the web app (skipped while its sources are unchanged)"
with_deadline 1800 "building the web app" node scripts/build-web.ts

log "starting Barnraise at http://localhost:$port  (press Ctrl-C to stop)"
# Every process runs in its own process group (job control on), so that Ctrl-C or a `kill` of this
# script stops npm, its shell and `next start` together, and nothing is left holding the port.
set -m
PORT="$port" npm run start --silent -w @barnraise/web &
server=$!
swarm=()
set +m # no job-status notices
logs="$data_dir/logs"
url="http://localhost:$port"

# none_running PGID...: no process of these process groups is left.
none_running() {
  local pgid
  for pgid in "$@"; do
    if kill -0 -- "-$pgid" 2>/dev/null; then return 1; fi
  done
}
# terminate WHAT SECONDS PGID...: SIGTERM to each process group; SIGKILL to what is left after SECONDS.
terminate() {
  local what="$1" limit="$2" pgid
  shift 2
  (($# > 0)) || return 0
  for pgid in "$@"; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
  wait_until "$limit" "$what to stop" none_running "$@" && return 0
  log "$what did not stop within $limit s of SIGTERM; sending SIGKILL"
  for pgid in "$@"; do kill -KILL -- "-$pgid" 2>/dev/null || true; done
  wait_until 5 "$what to end after SIGKILL" none_running "$@" || log "$what did not end even on SIGKILL (process groups $*)"
}
stop() {
  # The peers and the aux first: they finish their round and leave the swarm cleanly on SIGTERM.
  terminate "the aux and the peers" 30 "${swarm[@]}"
  terminate "the platform" 15 "$server"
}
stopping=0
# fail MESSAGE: says what did not happen, stops everything this script started, and exits 1.
fail() {
  log "$1"
  stopping=1
  stop
  exit 1
}
on_signal() {
  local pgid
  if ((stopping)); then
    log "stopping at once (SIGKILL)"
    for pgid in "${swarm[@]}" "$server"; do kill -KILL -- "-$pgid" 2>/dev/null || true; done
    exit 130
  fi
  stopping=1
  log "stopping (press Ctrl-C again to stop at once)"
  stop
  log "stopped"
  exit 0
}
trap on_signal INT TERM HUP

# The platform answers before anyone is told its address or the swarm joins it. Each try has a
# deadline of its own, and the wait ends early when the platform exits (scripts/wait-for-health.ts).
# It runs in the background so that a signal to this script is handled at once.
node scripts/wait-for-health.ts --url "$url" --within 120 --pid "$server" &
health=0
wait "$!" || health=$?
case "$health" in
  0) ;;
  2) fail "the platform's output is above (a port in use shows there as EADDRINUSE); stopping" ;;
  *) fail "the platform's output is above; stopping" ;;
esac

if ((peers > 0)); then
  set -a
  . "$tokens"
  set +a
  mkdir -p "$logs"
  set -m
  BARNRAISE_TOKEN="$DEMO_AUX_TOKEN" node apps/aux/src/cli.ts --server "$url" \
    --listen /ip4/127.0.0.1/tcp/0 --listen /ip4/127.0.0.1/tcp/0/ws \
    --listen /ip4/127.0.0.1/udp/0/webrtc-direct --identity "$data_dir/demo-swarm/aux/identity.json" \
    >"$logs/aux.log" 2>&1 &
  swarm+=($!)
  set +m
  # The peers find the swarm through the address the aux registers: let it do that first.
  aux_registered() {
    grep -q '"registered address"' "$logs/aux.log" 2>/dev/null && return 0
    kill -0 "${swarm[0]}" 2>/dev/null || return 2
    return 1
  }
  registered=0
  wait_until 60 "the aux peer to register its address (its log: $logs/aux.log)" aux_registered || registered=$?
  if ((registered != 0)); then
    log "last lines of $logs/aux.log:"
    tail -n 5 "$logs/aux.log" >&2 || true
    if ((registered == 2)); then
      fail "the aux peer exited before it registered its address with the platform; its log: $logs/aux.log"
    fi
    fail "the aux peer did not register its address with the platform within 60 s; its log: $logs/aux.log"
  fi
  set -m
  for ((i = 1; i <= peers; i++)); do
    BARNRAISE_TOKEN="$DEMO_PEER_TOKEN" node apps/peer/src/cli.ts --server "$url" --json \
      --listen /ip4/127.0.0.1/tcp/0 --listen /ip4/127.0.0.1/udp/0/webrtc-direct \
      --identity "$data_dir/demo-swarm/peer-$i/identity.json" \
      --data-dir "$data_dir/demo-swarm/peer-$i/data" >"$logs/peer-$i.log" 2>&1 &
    swarm+=($!)
  done
  set +m
  log "started an aux peer and $peers volunteer peers; their logs are in $logs"
fi

log "dashboard: $url/experiments/demo"
log "sign in as demo-organizer (or demo-volunteer) with password $DEMO_ORGANIZER_PASSWORD (kept in $secrets)"

# Runs until Ctrl-C (on_signal stops everything and exits) or until the platform ends on its own.
status=0
wait "$server" || status=$?
log "the platform exited (status $status); stopping the aux and the peers"
terminate "the aux and the peers" 30 "${swarm[@]}"
exit "$status"
