#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for the integration tests.
#
#   scripts/postgres.sh start   # prints the DATABASE_URL on stdout
#   scripts/postgres.sh stop
#
# Uses Debian's PostgreSQL, installing it with apt-get when it is missing and this runs as root.
# The cluster lives in $BARNRAISE_PG_DIR (default /tmp/barnraise-postgres-$port), trusts local
# connections, listens only on 127.0.0.1:$BARNRAISE_PG_PORT (default 55432), and is deleted on stop.
set -euo pipefail

port="${BARNRAISE_PG_PORT:-55432}"
dir="${BARNRAISE_PG_DIR:-/tmp/barnraise-postgres-$port}"
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# initdb refuses to run as root: run the server tools as the postgres user then.
as_owner() {
  if [[ "$(id -u)" -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
  [[ -n "$(pg_bin)" ]] || install_debian_package postgresql "the PostgreSQL tests" || exit 1
  local bin
  bin="$(pg_bin)"
  stop_quietly
  mkdir -p "$dir"
  [[ "$(id -u)" -ne 0 ]] || chown postgres: "$dir"
  as_owner "$bin/initdb" -D "$dir" -U barnraise --auth=trust --encoding=UTF8 --no-instructions >/dev/null
  as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U barnraise barnraise
  echo "postgresql://barnraise@127.0.0.1:$port/barnraise"
}

stop_quietly() {
  local bin
  bin="$(pg_bin)"
  if [[ -n "$bin" && -f "$dir/postmaster.pid" ]]; then
    as_owner "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop_quietly ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 64
    ;;
esac
